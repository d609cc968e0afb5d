"""Keep work leases alive while their items are legitimately being processed.

One renewal thread per process serves every lease the process holds: holding a lease costs a
dictionary entry, not a thread start and join per item (most items finish long before their
first renewal is due). Each held lease is renewed (a fenced UPDATE on token and version) every
``every_seconds``; renewal stops when processing ends, when the lease is lost (someone else took
the row, or a new version fenced it), or at ``max_seconds`` after the claim, so a hung worker
still gives the item up: the task's hard time limit sits below that bound. A worker that dies
stops renewing, and its lease expires ``lease_seconds`` after the last renewal.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from media_usage_worker.domain.work import WorkRecord
from media_usage_worker.repository.base.db import Bind
from media_usage_worker.repository.work_queue import work_processing as work

log = logging.getLogger(__name__)
# With nothing to renew the thread still wakes this often, so a new hold whose first renewal is
# due later than that needs no wake-up call (the usual case: items end long before it).
IDLE_WAKE_SECONDS = 1.0


@dataclass(eq=False)
class HeldLease:
    """One lease being kept; ``lost`` is set once a renewal found it gone."""

    bind: Bind
    claimed: WorkRecord
    lease_seconds: int
    every_seconds: float
    deadline: float
    next_renewal: float
    # Every (content id, version) of ``claimed``'s collection under its token (a batch's, or
    # ``claimed``'s own), renewed by one statement.
    versions: tuple[tuple[str, int], ...] = ()
    renewals: int = 0
    lost: threading.Event = field(default_factory=threading.Event)


class LeaseKeeper:
    """The process's renewal thread and the leases it keeps."""

    def __init__(self) -> None:
        self._ids = itertools.count()
        self._reset()

    def _reset(self) -> None:
        """Fresh state: also what a forked child starts from (it inherits no thread, and the
        parent's lock could have been held at the fork)."""
        self._wake = threading.Condition()
        self._held: dict[int, HeldLease] = {}
        self._thread: threading.Thread | None = None
        self._waiting_until = 0.0

    @contextmanager
    def keeping(
        self,
        bind: Bind,
        claimed: WorkRecord,
        *,
        lease_seconds: int,
        every_seconds: float,
        max_seconds: float,
        versions: tuple[tuple[str, int], ...] = (),
    ) -> Iterator[HeldLease]:
        now = time.monotonic()
        held = HeldLease(
            bind, claimed, lease_seconds, every_seconds, now + max_seconds, now + every_seconds,
            versions=versions or ((claimed.content_id, claimed.work_version),),
        )  # fmt: skip
        key = next(self._ids)
        with self._wake:
            self._held[key] = held
            if not self._ensure_thread() and held.next_renewal < self._waiting_until:
                self._wake.notify()
        try:
            yield held
        finally:
            with self._wake:
                self._held.pop(key, None)

    def _ensure_thread(self) -> bool:
        """Start the thread if this process has none; ``True`` when it was just started."""
        if self._thread is not None and self._thread.is_alive():
            return False
        self._waiting_until = 0.0
        self._thread = threading.Thread(target=self._run, name="media-usage-lease", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        while True:
            with self._wake:
                due = self._due_or_wait()
            for key, held in due:
                if not self._renew(held):
                    with self._wake:
                        self._held.pop(key, None)

    def _due_or_wait(self) -> list[tuple[int, HeldLease]]:
        """Leases whose renewal is due now; otherwise sleep until the next one is (or a hold
        that is due sooner wakes the thread)."""
        now = time.monotonic()
        for key, held in list(self._held.items()):
            if now >= held.deadline:
                del self._held[key]  # a hung item gives its lease up at max_seconds
        due = [(k, h) for k, h in self._held.items() if h.next_renewal <= now]
        if not due:
            renewals = [h.next_renewal for h in self._held.values()]
            self._waiting_until = min(renewals, default=now + IDLE_WAKE_SECONDS)
            self._wake.wait(self._waiting_until - now)
        return due

    @staticmethod
    def _renew(held: HeldLease) -> bool:
        """Renew once; ``False`` when the lease is gone and renewing should stop."""
        claimed = held.claimed
        if claimed.lease_token is None:
            return False  # a record without a token holds no lease to renew
        held.next_renewal = time.monotonic() + held.every_seconds
        try:
            kept = work.extend_batch_lease(
                held.bind,
                claimed.collection_id,
                claimed.lease_token,
                held.versions,
                held.lease_seconds,
            )
        except Exception:  # a database blip: try again next beat, the lease still runs
            log.warning("lease renewal failed for %s", claimed.content_id, exc_info=True)
            return True
        if not kept:
            held.lost.set()
            return False
        held.renewals += 1
        return True


keeper = LeaseKeeper()
os.register_at_fork(after_in_child=keeper._reset)
