"""The dispatch ledger of the server-less broker: one marker file per in-flight item."""

from __future__ import annotations

import os
import time
from pathlib import Path

from media_usage_worker.tasks.ledger import (
    FileLedger,
    NoLedger,
    dispatch_key,
    for_broker,
    forget_all,
)


def test_a_key_is_taken_once_until_released(tmp_path: Path) -> None:
    ledger = FileLedger(tmp_path / "dispatched")
    keys = [dispatch_key("c1", "e1", 1), dispatch_key("c1", "e2", 1), dispatch_key("c1", "e1", 1)]
    assert ledger.reserve(keys, ttl=60) == [True, True, False]
    assert ledger.reserve(keys[:1], ttl=60) == [False]
    ledger.release(keys[:1])
    assert ledger.reserve(keys[:1], ttl=60) == [True]
    assert ledger.reserve([dispatch_key("c1", "e1", 2)], ttl=60) == [True]  # a newer version


def test_an_expired_marker_counts_as_free(tmp_path: Path) -> None:
    ledger = FileLedger(tmp_path)
    key = dispatch_key("c1", "e1", 1)
    assert ledger.reserve([key], ttl=60) == [True]
    (marker,) = tmp_path.iterdir()
    old = time.time() - 120
    os.utime(marker, (old, old))
    assert ledger.reserve([key], ttl=60) == [True]
    assert ledger.reserve([key], ttl=60) == [False]


def test_ids_from_messages_never_become_paths(tmp_path: Path) -> None:
    ledger = FileLedger(tmp_path / "dispatched")
    ledger.reserve([dispatch_key("../../etc", "/passwd\x00", 1)], ttl=60)
    ledger.release([dispatch_key("../../etc", "/passwd\x00", 1)])
    assert [p.name for p in tmp_path.iterdir()] == ["dispatched"]


def test_the_broker_picks_the_ledger(tmp_path: Path) -> None:
    forget_all()
    assert isinstance(for_broker("filesystem://", str(tmp_path)), FileLedger)
    assert isinstance(for_broker("memory://", None), NoLedger)
    assert NoLedger().reserve(["a", "a"], ttl=1) == [True, True]
