"""Worker "hosts" in Linux network namespaces, joined to this host by veth links that a test
can cut and heal: a real network partition, not a mock.

Each host gets two links, one to PostgreSQL and one to Redis (both run here, on the links'
addresses), so a test can cut a host off from either server or both. ``ip`` needs root (or
CAP_NET_ADMIN); ``available`` says why a machine cannot, so the test skips with that reason.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

SERVICES = ("pg", "rd")
# A private range of this machine's own test hosts; nothing outside the namespaces uses it.
SUBNET = "10.231"


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


def available() -> str | None:
    """``None`` when namespaces and veth links can be made here, else why not."""
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is missing"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"mu-probe-{os.getpid()}"
    made = _ip("netns", "add", probe)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    _ip("netns", "del", probe)
    return None


@dataclass
class Host:
    index: int
    namespace: str
    links: dict[str, str]  # service -> this side's interface name
    octets: dict[str, int] = field(default_factory=dict)  # service -> its link's /24

    def address_of(self, service: str) -> str:
        """The server's address as this host reaches it over its own link."""
        return f"{SUBNET}.{self.octets[service]}.1"

    def command_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.namespace]


# A namespace of this module's, named for the process that made it.
_NAMESPACE = re.compile(r"mu-host\d+-(\d+)(?:-\d+)?")
_made = itertools.count(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reclaim_leftovers() -> None:
    """Remove namespaces a killed test run left behind (its ``close`` never ran): their links
    would hold addresses of this range. Deleting a namespace deletes the veth pairs in it."""
    for line in _ip("netns", "list").stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        made_by = _NAMESPACE.fullmatch(name)
        if made_by is not None and not _alive(int(made_by.group(1))):
            _ip("netns", "del", name)


def _free_octets() -> list[int]:
    """Third octets of this range that no interface here uses: a run beside another (or
    beside a leftover) never shares an address, so no reply is routed down a wrong link."""
    used = {int(m.group(1)) for m in re.finditer(
        rf"\b{re.escape(SUBNET)}\.(\d+)\.", _ip("-o", "addr").stdout)}  # fmt: skip
    return [octet for octet in range(1, 255) if octet not in used]


class Network:
    """Hosts ``1..count``; ``close`` removes every namespace and link it made."""

    def __init__(self, count: int) -> None:
        pid, serial = os.getpid(), next(_made)
        reclaim_leftovers()
        free = iter(_free_octets())
        self.hosts: list[Host] = []
        try:
            for index in range(1, count + 1):
                namespace = f"mu-host{index}-{pid}-{serial}"
                self._must("netns", "add", namespace)
                links: dict[str, str] = {}
                # Known before its links exist, so ``close`` removes whatever was made.
                host = Host(index, namespace, links)
                self.hosts.append(host)
                self._must("-n", namespace, "link", "set", "lo", "up")
                for service in SERVICES:
                    octet = host.octets[service] = next(free)
                    # Unique while its octet is; an interface name has at most 15 characters.
                    here = f"mu{octet}{service[0]}{pid % 10**7}"
                    there = here + "x"
                    self._must("link", "add", here, "type", "veth", "peer", "name", there)
                    links[service] = here
                    self._must("link", "set", there, "netns", namespace)
                    self._must("addr", "add", f"{SUBNET}.{octet}.1/30", "dev", here)
                    self._must("-n", namespace, "addr", "add", f"{SUBNET}.{octet}.2/30",
                               "dev", there)  # fmt: skip
                    self._must("link", "set", here, "up")
                    self._must("-n", namespace, "link", "set", there, "up")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _must(*args: str) -> None:
        done = _ip(*args)
        if done.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")

    def cut(self, host: Host, *services: str) -> None:
        for service in services:
            self._must("link", "set", host.links[service], "down")

    def heal(self, host: Host, *services: str) -> None:
        for service in services:
            self._must("link", "set", host.links[service], "up")

    def degrade(self, host: Host, delay_ms: int, loss_percent: float) -> str | None:
        """Latency and loss on the host's links (``tc netem``); why not, where the kernel has
        no netem."""
        for service in SERVICES:
            done = subprocess.run(
                [*host.command_prefix(), "tc", "qdisc", "add", "dev", host.links[service] + "x",
                 "root", "netem", "delay", f"{delay_ms}ms", "loss", f"{loss_percent}%"],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                return f"tc netem is unavailable here: {done.stderr.strip()}"
        return None

    def restore(self, host: Host) -> None:
        for service in SERVICES:
            subprocess.run(
                [*host.command_prefix(), "tc", "qdisc", "del", "dev", host.links[service] + "x",
                 "root"],
                capture_output=True, check=False,
            )  # fmt: skip

    def close(self) -> None:
        for host in self.hosts:
            for here in host.links.values():
                _ip("link", "del", here)
            _ip("netns", "del", host.namespace)
        self.hosts = []
