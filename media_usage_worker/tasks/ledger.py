"""Which items have a message in flight, so a tick does not queue the same item twice.

Advisory only: losing the ledger (FLUSHALL, a restart, a wiped folder) means an item may be
sent twice, and a duplicate is harmless because its claim fails. Each key lives at most the
dispatch TTL and is dropped when the item's task finishes.

- Redis broker: one ``SET NX PX`` key per (item, version), a page of keys in one script call.
  Redis's own clock times the keys out, so hosts whose clocks disagree agree on them.
- Filesystem broker (the embedded demo): one marker file per key, created with ``O_EXCL``; a
  marker older than the TTL counts as gone.
- Anything else: no ledger; every due item is sent.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import redis

log = logging.getLogger(__name__)
KEY_PREFIX = "media_usage:dispatched"


def _unavailable(exc: Exception) -> None:
    # One line, no traceback: this runs in host processes too (after_write) and is expected
    # whenever the broker is down.
    log.warning("dispatch de-duplication unavailable; sending anyway: %s", str(exc)[:200])


def dispatch_key(collection_id: str, content_id: str, work_version: int | str) -> str:
    return f"{KEY_PREFIX}:{work_version}:{len(collection_id)}:{collection_id}:{content_id}"


class Ledger(Protocol):
    def reserve(self, keys: Sequence[str], ttl: float) -> list[bool]:
        """For each key, ``True`` if it was free and is now taken for ``ttl`` seconds."""

    def release(self, keys: Sequence[str]) -> None:
        """Free the keys at once (their items' task has finished)."""


class NoLedger:
    def reserve(self, keys: Sequence[str], ttl: float) -> list[bool]:
        return [True] * len(keys)

    def release(self, keys: Sequence[str]) -> None:
        return None


# One command for a page of keys: as many SET commands pipelined cost the tick more in
# redis-py's packing and parsing than Redis spends running them.
_RESERVE = """
local taken = {}
for i, key in ipairs(KEYS) do
  taken[i] = redis.call('SET', key, '1', 'NX', 'PX', ARGV[1]) and 1 or 0
end
return taken
"""


class RedisLedger:
    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=5)
        self._reserve = self.client.register_script(_RESERVE)

    def reserve(self, keys: Sequence[str], ttl: float) -> list[bool]:
        if not keys:
            return []
        try:
            milliseconds = max(1, round(ttl * 1000))
            return [bool(ok) for ok in self._reserve(keys=list(keys), args=[milliseconds])]
        except redis.RedisError as exc:
            _unavailable(exc)
            return [True] * len(keys)

    def release(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        try:
            self.client.delete(*keys)
        except redis.RedisError:
            log.debug("could not release dispatch key", exc_info=True)


class FileLedger:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, key: str) -> Path:
        # Hashed: keys hold ids from messages, which must never become path segments.
        return self.folder / hashlib.sha256(key.encode()).hexdigest()

    def _take(self, path: Path, ttl: float) -> bool:
        for _ in range(2):
            try:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
                return True
            except FileExistsError:
                try:
                    expired = time.time() - path.stat().st_mtime > ttl
                except FileNotFoundError:
                    continue  # released meanwhile: try once more
                if not expired:
                    return False
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        return False

    def reserve(self, keys: Sequence[str], ttl: float) -> list[bool]:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            return [self._take(self._path(key), ttl) for key in keys]
        except OSError as exc:
            _unavailable(exc)
            return [True] * len(keys)

    def release(self, keys: Sequence[str]) -> None:
        for key in keys:
            with contextlib.suppress(OSError):
                self._path(key).unlink()


_ledgers: dict[tuple[str, str], Ledger] = {}


def for_broker(url: str, folder: str | None) -> Ledger:
    """The ledger that fits the broker (one per process and broker)."""
    cache_key = (url, folder or "")
    ledger = _ledgers.get(cache_key)
    if ledger is None:
        if url.startswith(("redis://", "rediss://", "unix://")):
            ledger = RedisLedger(url)
        elif url.startswith("filesystem://") and folder:
            ledger = FileLedger(Path(folder) / "dispatched")
        else:
            ledger = NoLedger()
        _ledgers[cache_key] = ledger
    return ledger


def forget_all() -> None:
    """Drop cached clients (tests point the app at another broker)."""
    _ledgers.clear()
