"""Index one key range of a reconciliation's scan (docs/design.md §6, "Ranges").

The range is claimed under one lease and worked ``RANGE_CHUNK`` entries at a time: one read of
the chunk's entries, extraction in Python, then one transaction that locks the range row
(``ranges.hold``, its first statement, fenced by the lease and the run), writes every
entry's index rows unleased (each source row is still guarded by its content version and the
source as read), hands back as work rows at the run's epoch every entry it could not index
(a refresh that failed, a guard that lost, a write the database refused), and moves the range
past the chunk (``ranges.move_on``). Those handed back then retry, back off and fail like any
work item. No work row is written for an entry that indexes cleanly, which is most of a
backfill.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from media_usage_worker.domain import policy
from media_usage_worker.domain.extraction import MediaUrls
from media_usage_worker.domain.refresh_plan import EntryWrite, columns_to_read, plan_refresh
from media_usage_worker.domain.validation import split_usable
from media_usage_worker.pipeline.refresh import Plan, describe, plan_entries, refresh_error
from media_usage_worker.repository.base.db import transaction
from media_usage_worker.repository.index import projection
from media_usage_worker.repository.index.source_writes import apply_writes
from media_usage_worker.repository.reconciling import ranges
from media_usage_worker.repository.reconciling import reconciliation as store
from media_usage_worker.repository.reconciling.ranges import BackfillRange

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

__all__ = ["MAX_RANGE_CLAIMS", "RANGE_CHUNK", "RangeOutcome", "RangeReport", "RangeRun"]
log = logging.getLogger(__name__)
# Claims of one range before the rest of it goes back as work rows: a range whose holder was
# killed or ran out of time this often holds an entry that needs the per-item path's attempts.
MAX_RANGE_CLAIMS = 3
# Entries read, planned and written in one transaction: a whole range of the default size.
# Fewer, larger write transactions matter on SQLite, where the workers take turns with the one
# write lock (100 a chunk indexed about 9 % fewer entries a second there); the entries' text
# in memory is bounded by this many entries' limits (``Limits.max_entry_chars``).
RANGE_CHUNK = 300


class RangeOutcome(StrEnum):
    DONE = "done"  # every entry indexed or handed back; the range is gone
    CLAIM_LOST = "claim_lost"  # not claimable (done, held, or another run's): nothing done
    LEASE_LOST = "lease_lost"  # lost its lease or run half-way: the chunks committed stay
    DEMOTED = "demoted"  # claimed too often: the rest went back as work rows
    RELEASED = "released"  # out of time: given back, resumed after the last committed chunk


@dataclass(frozen=True)
class RangeReport:
    outcome: RangeOutcome
    indexed: int = 0
    handed_back: int = 0

    def as_dict(self) -> dict[str, object]:
        return {"outcome": self.outcome.value, "indexed": self.indexed,
                "handed_back": self.handed_back}  # fmt: skip


class _Lost(Exception):
    """The range's lease or run was lost: the chunk's transaction rolls back."""


@dataclass
class RangeRun:
    """The settings one range's processing uses; ``run`` claims and indexes it."""

    engine: Engine
    limits: policy.Limits
    lease_seconds: int = policy.LEASE_SECONDS
    interrupts: tuple[type[BaseException], ...] = ()
    # Called after a chunk was read and planned, before its transaction: tests race it.
    before_write: Callable[[], None] | None = None
    # Called once when the range's end woke the collection's waiting reconciliation.
    on_drained: Callable[[], object] | None = None
    _indexed: int = field(default=0, init=False)
    _handed_back: int = field(default=0, init=False)

    def run(self, collection_id: str, range_id: str) -> RangeReport:
        claimed = ranges.claim_range(self.engine, collection_id, range_id, self.lease_seconds)
        if claimed is None:
            return RangeReport(RangeOutcome.CLAIM_LOST)
        if claimed.claim_count > MAX_RANGE_CLAIMS:
            handed_back = ranges.demote(self.engine, claimed)
            log.warning(
                "key range %s of %s was claimed %d times; its %d entries left go back as work "
                "items", range_id, claimed.collection_slug, claimed.claim_count - 1, handed_back,
            )  # fmt: skip
            return RangeReport(RangeOutcome.DEMOTED, handed_back=handed_back)
        outcome = self._chunks(claimed)
        if outcome == RangeOutcome.DONE and self.on_drained is not None:
            self._wake(collection_id)
        return RangeReport(outcome, self._indexed, self._handed_back)

    def _chunks(self, r: BackfillRange) -> RangeOutcome:
        with self.engine.connect() as conn:
            try:
                while True:
                    ids = ranges.next_ids(conn, r, RANGE_CHUNK)
                    to_key = ids[-1] if len(ids) == RANGE_CHUNK else r.last_key
                    if not self._chunk(conn, r, ids, to_key):
                        return RangeOutcome.LEASE_LOST
                    if to_key == r.last_key:
                        return RangeOutcome.DONE
                    r = replace(r, after_key=to_key)
            except self.interrupts:
                conn.invalidate()
                # Through the engine: this connection is gone. The committed chunks stay done.
                ranges.release_range(self.engine, r)
                return RangeOutcome.RELEASED

    def _chunk(self, conn: Connection, r: BackfillRange, ids: list[str], to_key: str) -> bool:
        """Index one chunk and move the range past ``to_key``; ``False``: the lease was lost."""
        usable, _ = split_usable(ids, lambda content_id: content_id)
        try:
            writes, refused = self._plan(conn, r, usable)
        except _Lost:
            return False
        if self.before_write is not None:
            self.before_write()
        try:
            with transaction(conn) as tx:
                if not ranges.hold(tx, r):
                    raise _Lost
                held = apply_writes(tx, [w for _, w in writes])
                back = refused + [i for (i, _), ok in zip(writes, held, strict=True) if not ok]
                ranges.enqueue_entries(tx, r, back)
                if not ranges.move_on(tx, r, to_key, self.lease_seconds):
                    raise _Lost
        except _Lost:
            return False
        except Exception as exc:
            if isinstance(exc, self.interrupts):
                raise
            # One entry the database refuses must not hold the others: the chunk rolled back
            # whole, and every entry of it goes back as a work item, where only it fails.
            log.warning(
                "a key range's shared write failed (%s); its %d entries go back as work items",
                describe(exc), len(usable),
            )  # fmt: skip
            try:
                with transaction(conn) as tx:
                    if not ranges.hold(tx, r):
                        return False
                    ranges.enqueue_entries(tx, r, usable)
                    ranges.move_on(tx, r, to_key, self.lease_seconds)  # locked: it holds
            except Exception as again:
                if isinstance(again, self.interrupts):
                    raise
                # Nothing of the chunk was written: the range stays leased until its lease
                # runs out, and is claimed again (and, claimed too often, handed back whole).
                log.warning("a key range could not hand its entries back: %s", describe(again))
                return False
            self._handed_back += len(usable)
            return True
        self._indexed += len(writes) - (len(back) - len(refused))
        self._handed_back += len(back)
        return True

    def _plan(
        self, conn: Connection, r: BackfillRange, ids: list[str]
    ) -> tuple[list[tuple[str, EntryWrite]], list[str]]:
        """Each entry's write, and the entries that have none (handed back as work items)."""
        if not ids:
            return [], []
        try:
            state = projection.read_entries(
                conn, r.collection_id, r.collection_slug, ids, columns_to_read
            )
        except Exception as exc:
            if isinstance(exc, self.interrupts):
                raise
            log.warning("a key range's shared read failed (%s)", describe(exc))
            return [], ids
        if not state.present:
            # Renamed or going: the run no longer owns the collection, and its restart (or
            # the deletion) removes the range. Nothing of it is passed over.
            raise _Lost

        def plan_one(content_id: str, urls: MediaUrls) -> Plan:
            entry = state.entries[content_id]
            try:
                return plan_refresh(entry, state.fields, self.limits, None, urls=urls)
            except Exception as exc:
                if isinstance(exc, self.interrupts):
                    raise
                return refresh_error(entry.entry, exc)

        writes: list[tuple[str, EntryWrite]] = []
        refused: list[str] = []
        for content_id, plan in plan_entries(conn, state, ids, plan_one).items():
            if isinstance(plan, EntryWrite):
                writes.append((content_id, plan))
            else:
                refused.append(content_id)
        return writes, refused

    def _wake(self, collection_id: str) -> None:
        """Wake the collection's waiting reconciliation when few ranges are left, and take its
        next step (more ranges, or the phase after the scan). A failure costs the head start."""
        try:
            if store.wake_if_drained(self.engine, collection_id) and self.on_drained is not None:
                self.on_drained()
        except Exception as exc:
            if isinstance(exc, self.interrupts):
                raise
            log.warning("reconciliation after a key range failed: %s", describe(exc))
