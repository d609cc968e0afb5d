"""The partition harness survives a run that was killed before it could clean up: a leftover
namespace is removed, and a network made beside another never shares its addresses (a shared
address sends replies down the wrong link, and the workers never reach their servers)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.chaos import network


@pytest.fixture
def can_partition() -> None:
    why_not = network.available()
    if why_not is not None:
        pytest.skip(f"no network namespaces here: {why_not}")


def _namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}


@pytest.fixture
def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture
def leftover(can_partition: None, dead_pid: int) -> Iterator[str]:
    name = f"mu-host1-{dead_pid}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    yield name
    subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def test_a_killed_runs_namespace_is_reclaimed(leftover: str) -> None:
    made = network.Network(1)
    try:
        assert leftover not in _namespaces()
        assert made.hosts[0].namespace in _namespaces()
    finally:
        made.close()
    assert made.hosts == []


def test_two_networks_side_by_side_use_different_addresses(can_partition: None) -> None:
    first = network.Network(2)
    try:
        second = network.Network(2)
        try:
            mine = {h.address_of(s) for h in first.hosts for s in network.SERVICES}
            theirs = {h.address_of(s) for h in second.hosts for s in network.SERVICES}
            assert len(mine) == len(theirs) == 4
            assert mine.isdisjoint(theirs)
            # A live run's namespaces are never taken for leftovers.
            assert {h.namespace for h in first.hosts} <= _namespaces()
        finally:
            second.close()
    finally:
        first.close()
