"""Process a batch of work items (1 to ``domain.work.MAX_BATCH``) with a fixed number of statements.

Per collection of the batch: one guarded claim, one read of the fields, entries, drafts and
sources, extraction in Python, then one transaction that writes every entry under a savepoint
of its own and completes every item whose write held with one guarded statement. An entry
whose compare-and-set lost is refreshed again on its own (``refresh_entry``), so a race costs
that entry a re-read, never the batch. Failures retry or fail per item, as one item would.
Every statement after the claim is fenced by each item's lease (docs/design.md §3).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from media_usage_worker.domain import policy
from media_usage_worker.domain.extraction import MediaUrls
from media_usage_worker.domain.refresh_plan import (
    CollectionState,
    EntryWrite,
    columns_to_read,
    plan_refresh,
)
from media_usage_worker.domain.snapshots import ContentEntry
from media_usage_worker.domain.vocabulary import ErrorCode, Outcome, RefreshCode
from media_usage_worker.domain.work import Item, WorkRecord, grouped
from media_usage_worker.pipeline.lease_keeper import keeper
from media_usage_worker.pipeline.refresh import describe, plan_entries, refresh_entry, refresh_error
from media_usage_worker.pipeline.settle import (
    EntryOutcome,
    ProcessResult,
    claimed_lease,
    entry_outcome,
    lost,
    result,
    settle,
)
from media_usage_worker.repository.base.db import Bind
from media_usage_worker.repository.index import projection
from media_usage_worker.repository.reconciling import coverage
from media_usage_worker.repository.reconciling import reconciliation as store
from media_usage_worker.repository.registry.collections import is_registered
from media_usage_worker.repository.work_queue import work_processing as work
from media_usage_worker.repository.work_queue.work_processing import write_and_complete

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

__all__ = ["BatchRun", "Heartbeat", "ProcessResult"]
# Entries read, planned and written together. A claim holds up to ``MAX_BATCH`` items, and
# is worked a chunk at a time: the entries' text in memory is bounded by this many entries'
# limits (``Limits.max_entry_chars``) whatever the claim's size.
READ_CHUNK = 100
log = logging.getLogger(__name__)
# What a failure without an exception of its own means, for the log line that reports it.
_CAUSES: dict[ErrorCode, str] = {
    ErrorCode.TIME_LIMIT: "the item ran past the worker's soft time limit",
    ErrorCode.GENERATION_CONFLICT: "concurrent writes overtook every refresh of the entry",
    ErrorCode.RESOURCE_LIMIT: "the entry is over the per-item limits (docs/operations.md, Limits)",
}
_REFRESH_CAUSES: dict[RefreshCode, str] = {
    RefreshCode.DRAFT_REVISION_NOT_FOUND: "the entry's draft revision does not exist",
    RefreshCode.DRAFT_REVISION_INVALID: "the entry's draft revision is not a JSON object",
    RefreshCode.DRAFT_REVISION_MISMATCH: "the entry's draft revision belongs to another entry",
}


@dataclass(frozen=True)
class Heartbeat:
    every_seconds: float
    max_seconds: float


@dataclass
class BatchRun:
    """The settings one run of the path uses; ``run`` processes the checked items."""

    engine: Engine
    limits: policy.Limits
    lease_seconds: int = policy.LEASE_SECONDS
    rand: Callable[[], float] = random.random
    heartbeat: Heartbeat | None = None
    interrupts: tuple[type[BaseException], ...] = ()
    # Called after the entries were read and planned, before anything is written: tests use it
    # to race the batch (a write, a lost lease, a slow item, the soft time limit).
    before_write: Callable[[], None] | None = None
    # Called once after the batch when it woke a waiting reconciliation (its collection's work
    # has almost drained): the worker takes the reconciliation's next steps at once instead of
    # leaving the workers idle until the next reconcile tick.
    on_drained: Callable[[], object] | None = None
    # Set once an interrupt (the soft time limit) arrived: the rest of the batch is not started.
    _interrupted: bool = field(default=False, init=False)
    # What each failed entry's refresh raised, by content id, for the retry or failure log line.
    _causes: dict[str, str] = field(default_factory=dict, init=False)
    # The entry being read and extracted on its own, if any: when the soft time limit arrives
    # then, it is the one that took the time, and only it is charged an attempt.
    _working_on: str | None = field(default=None, init=False)
    _woke_reconciliation: bool = field(default=False, init=False)

    def run(self, items: Sequence[Item]) -> list[ProcessResult]:
        results: list[ProcessResult] = []
        # One connection for the whole batch: one checkout and one pre-ping.
        with self.engine.connect() as conn:
            for group in grouped(items, lambda item: item.collection_id):
                if self._interrupted:
                    # Not claimed, so still due: a later tick sends these items again.
                    results += [lost(i) for i in group]
                else:
                    results += self._collection(conn, group[0].collection_id, group)
        if self._woke_reconciliation and self.on_drained is not None and not self._interrupted:
            try:
                self.on_drained()
            except Exception as exc:
                if isinstance(exc, self.interrupts):
                    raise
                # The next reconcile tick takes the step: nothing is lost but the head start.
                log.warning("reconciliation after a drained batch failed: %s", describe(exc))
        return results

    def _collection(
        self, conn: Connection, collection_id: str, items: list[Item]
    ) -> list[ProcessResult]:
        versions = [(i.content_id, i.work_version) for i in items]
        claimed = work.claim_batch(conn, collection_id, versions, self.lease_seconds)
        taken = {(r.content_id, r.work_version) for r in claimed}
        results = [lost(i) for i in items if (i.content_id, i.work_version) not in taken]
        # Rows of one collection may carry different slugs (captured before a rename).
        for records in grouped(claimed, lambda record: record.collection_slug):
            if self._interrupted:
                # Claimed before the interrupt: each goes back with the time-limit code.
                results += [self._settle(self.engine, r, ErrorCode.TIME_LIMIT) for r in records]
            else:
                results += self._claimed(conn, records)
        return results

    def _claimed(self, conn: Connection, records: list[WorkRecord]) -> list[ProcessResult]:
        first = records[0]
        results: list[ProcessResult] = []
        try:
            with self._keeping(records):
                for start in range(0, len(records), READ_CHUNK):
                    results += self._refresh_all(conn, records[start : start + READ_CHUNK])
        except self.interrupts:
            self._interrupted = True
            conn.invalidate()
            # The leases go back through the engine: this connection is gone. Entries of the
            # chunks already done keep their results.
            done = {r.content_id for r in results}
            left = [r for r in records if r.content_id not in done]
            culprit, self._working_on = self._working_on, None
            if culprit is None:  # out of time in a shared read or write: nobody in particular
                return results + [self._settle(self.engine, r, ErrorCode.TIME_LIMIT) for r in left]
            return results + [
                self._settle(self.engine, r, ErrorCode.TIME_LIMIT)
                if r.content_id == culprit
                else self._release(self.engine, r)
                for r in left
            ]
        if any(r.outcome == Outcome.COMPLETED for r in results):
            # Noted once, after the completions committed: were both in one transaction, the
            # last two completions of a collection could each see the other's row and neither
            # restore ``complete``.
            coverage.record_incremental_success(conn, first.collection_id, first.collection_slug)
            if self.on_drained is not None:
                self._wake(conn, first.collection_id)
        return results

    def _wake(self, conn: Connection, collection_id: str) -> None:
        """Wake the collection's waiting reconciliation if its work has almost drained. The
        items are complete already: a failure here costs only the head start (the next
        reconcile tick takes the step)."""
        try:
            if store.wake_if_drained(conn, collection_id):
                self._woke_reconciliation = True
        except Exception as exc:
            if isinstance(exc, self.interrupts):
                raise
            log.warning("could not wake the reconciliation of %s: %s", collection_id, describe(exc))

    def _refresh_all(self, conn: Connection, records: list[WorkRecord]) -> list[ProcessResult]:
        first = records[0]
        ids = [r.content_id for r in records]
        try:
            state = projection.read_entries(
                conn, first.collection_id, first.collection_slug, ids, columns_to_read
            )
        except Exception as exc:
            if isinstance(exc, self.interrupts):
                raise
            code = refresh_error(ContentEntry(first.collection_id, first.collection_slug, ""), exc)
            self._causes.update(dict.fromkeys(ids, describe(exc)))
            return [self._settle(conn, r, policy.work_error_code(code)) for r in records]
        if not state.present:
            return [self._obsolete(conn, r) for r in records]
        writes, failed = self._plan_all(conn, state, records)
        if self.before_write is not None:
            self.before_write()
        token = first.lease_token
        assert token is not None  # a claimed record holds its lease
        try:
            written, completed = write_and_complete(conn, first.collection_id, token, writes)
        except Exception as exc:
            if isinstance(exc, self.interrupts):
                raise
            # One entry the database refuses (a value past an index's limit, a statement
            # timeout, a full disk) must not hold its batch-mates: the shared write rolled back
            # whole, so each entry is written on its own, and only the culprit fails.
            log.warning(
                "a batch's shared write failed (%s); its %d entries are written one by one",
                describe(exc), len(writes),
            )  # fmt: skip
            written, completed = set(), set()
        results = []
        for record in records:
            match entry_outcome(record.content_id, failed, written, completed):
                case EntryOutcome.REFRESH_FAILED:
                    code = failed[record.content_id]
                    results.append(self._failed_refresh(conn, record, code))
                case EntryOutcome.COMPLETED:
                    results.append(result(record, Outcome.COMPLETED))
                case EntryOutcome.SUPERSEDED:
                    results.append(result(record, Outcome.SUPERSEDED))
                case EntryOutcome.ALONE:
                    results.append(self._alone(conn, record))
        return results

    def _plan_all(
        self, conn: Connection, state: CollectionState, records: list[WorkRecord]
    ) -> tuple[list[tuple[str, int, EntryWrite]], dict[str, RefreshCode]]:
        """Each entry's write, or the code of why it has none."""
        writes: list[tuple[str, int, EntryWrite]] = []
        failed: dict[str, RefreshCode] = {}
        by_id = {record.content_id: record for record in records}

        def plan_one(content_id: str, urls: MediaUrls) -> EntryWrite | RefreshCode:
            entry = state.entries[content_id]
            self._working_on = content_id
            try:
                lease = claimed_lease(by_id[content_id])
                plan = plan_refresh(entry, state.fields, self.limits, lease, urls=urls)
            except Exception as exc:
                if isinstance(exc, self.interrupts):
                    raise
                self._causes[content_id] = describe(exc)
                plan = refresh_error(entry.entry, exc)
            self._working_on = None
            return plan

        for content_id, plan in plan_entries(conn, state, list(by_id), plan_one).items():
            if isinstance(plan, EntryWrite):
                writes.append((content_id, by_id[content_id].work_version, plan))
            else:
                failed[content_id] = plan
        return writes, failed

    def _alone(self, conn: Connection, record: WorkRecord) -> ProcessResult:
        """An entry whose compare-and-set lost in the batch: read and write it on its own."""
        lease = claimed_lease(record)
        entry = ContentEntry(record.collection_id, record.collection_slug, record.content_id)
        self._working_on = record.content_id
        code = refresh_entry(
            conn, entry, self.limits, lease, reraise=self.interrupts, causes=self._causes
        )
        self._working_on = None
        if code is not None:
            return self._failed_refresh(conn, record, code)
        if work.complete_lease(conn, lease):
            return result(record, Outcome.COMPLETED)
        return result(record, Outcome.SUPERSEDED)

    def _failed_refresh(
        self, conn: Connection, record: WorkRecord, code: RefreshCode
    ) -> ProcessResult:
        # A refresh of an entry whose collection is gone fails; the item is then obsolete.
        if not is_registered(conn, record.collection_id, record.collection_slug):
            return self._obsolete(conn, record)
        if code in _REFRESH_CAUSES:
            self._causes.setdefault(record.content_id, _REFRESH_CAUSES[code])
        return self._settle(conn, record, policy.work_error_code(code))

    @staticmethod
    def _obsolete(bind: Bind, record: WorkRecord) -> ProcessResult:
        done = work.complete_lease(bind, claimed_lease(record))
        return result(record, Outcome.OBSOLETE if done else Outcome.SUPERSEDED)

    def _settle(self, bind: Bind, record: WorkRecord, code: ErrorCode) -> ProcessResult:
        """Retry the item with backoff, or fail it for good (and say so on the coverage row).
        Either is logged once, with its cause: a WARNING for a retry, an ERROR for a failure."""

        def note_failure(failed: WorkRecord, failed_code: ErrorCode) -> None:
            coverage.record_incremental_failure(
                bind, failed.collection_id, failed.collection_slug, failed.content_id,
                failed.work_version, failed_code,
            )  # fmt: skip

        settled = settle(work, bind, record, code, self.rand, note_failure)
        if settled.changed:
            level = logging.ERROR if settled.retry_in is None else logging.WARNING
            self._report(level, record, code, record.attempt_count + 1, settled.retry_in)
        return settled.result

    @staticmethod
    def _release(bind: Bind, record: WorkRecord) -> ProcessResult:
        """A batch-mate of the entry that ran out of time: its lease goes back uncharged."""
        if work.release_lease(bind, claimed_lease(record)):
            return result(record, Outcome.RETRY)
        return result(record, Outcome.SUPERSEDED)

    def _report(
        self, level: int, record: WorkRecord, code: ErrorCode, attempt: int, delay: int | None
    ) -> None:
        cause = self._causes.get(record.content_id) or _CAUSES.get(code, code.value)
        fields = {
            "event": "media_usage.item_failed" if delay is None else "media_usage.item_retry",
            "collection": record.collection_slug,
            "collection_id": record.collection_id,
            "content_id": record.content_id,
            "work_version": record.work_version,
            "error_code": code.value,
            "attempt": attempt,
            "retry_in_seconds": delay,
            "cause": cause,
        }
        if delay is None:
            log.log(
                level,
                "media usage item %s/%s failed for good after attempt %d: %s (%s)",
                record.collection_slug, record.content_id, attempt, code.value, cause,
                extra={"media_usage": fields},
            )  # fmt: skip
        else:
            log.log(
                level,
                "media usage item %s/%s will retry in %d s after attempt %d: %s (%s)",
                record.collection_slug, record.content_id, delay, attempt, code.value, cause,
                extra={"media_usage": fields},
            )  # fmt: skip

    def _keeping(self, records: list[WorkRecord]) -> AbstractContextManager[object]:
        if self.heartbeat is None:
            return nullcontext()
        return keeper.keeping(
            self.engine,
            records[0],
            lease_seconds=self.lease_seconds,
            every_seconds=self.heartbeat.every_seconds,
            max_seconds=self.heartbeat.max_seconds,
            versions=tuple((r.content_id, r.work_version) for r in records),
        )
