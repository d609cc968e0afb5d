"""Process one work item end to end (docs/design.md §3): claim, refresh, complete or retry/fail.

Plain Python over the repositories; the Celery task only calls ``process_work_item``. Every
step after the claim is fenced by the lease (token and work version), so a stale message, a
duplicate, or a worker whose lease expired cannot change anything.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from media_usage_worker.domain import policy
from media_usage_worker.domain.snapshots import ContentEntry
from media_usage_worker.domain.vocabulary import ErrorCode, Outcome, RefreshCode
from media_usage_worker.domain.work import Lease, WorkRecord
from media_usage_worker.pipeline.lease_keeper import keeper
from media_usage_worker.pipeline.refresh import refresh_entry
from repository import coverage
from repository.collections import is_registered
from repository.work import MediaUsageWorkRepository

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

    Refresh = Callable[[Connection, ContentEntry, policy.Limits, Lease], RefreshCode | None]


@dataclass(frozen=True)
class ProcessResult:
    outcome: Outcome
    collection_id: str
    content_id: str
    work_version: int
    error_code: ErrorCode | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class Heartbeat:
    every_seconds: float
    max_seconds: float


def process_work_item(
    engine: Engine,
    *,
    collection_id: str,
    content_id: str,
    work_version: int | str,
    limits: policy.Limits | None = None,
    lease_seconds: int = policy.LEASE_SECONDS,
    rand: Callable[[], float] = random.random,
    refresh: Refresh | None = None,
    heartbeat: Heartbeat | None = None,
    interrupts: tuple[type[BaseException], ...] = (),
) -> ProcessResult:
    """Run one item. Invalid arguments raise ``InvalidArgument`` before anything is written.

    With ``heartbeat`` the lease is renewed while the refresh runs, so a long item is not taken
    over while its worker is alive. An exception of the ``interrupts`` types raised during the
    refresh (the worker's soft time limit) discards the connection, which may be half-way
    through a statement, and retries the item with ``MEDIA_USAGE_TIME_LIMIT`` (failed after the
    attempt limit), so an item that is always too slow cannot loop for ever. The default
    refresh (``refresh_entry``) lets those exceptions through; a ``refresh`` given instead must
    do the same.
    """
    # One connection for the whole item: one checkout and one pre-ping instead of one per step.
    with engine.connect() as conn:
        return _Item(
            conn,
            MediaUsageWorkRepository(engine),
            limits=limits or policy.Limits(),
            lease_seconds=lease_seconds,
            rand=rand,
            refresh=refresh or partial(refresh_entry, reraise=interrupts),
            heartbeat=heartbeat,
            interrupts=interrupts,
        ).run(collection_id, content_id, work_version)


@dataclass
class _Item:
    conn: Connection
    # The renewal thread and anything after ``conn.invalidate()`` go through the engine.
    engine_repo: MediaUsageWorkRepository
    limits: policy.Limits
    lease_seconds: int
    rand: Callable[[], float]
    refresh: Refresh
    heartbeat: Heartbeat | None
    interrupts: tuple[type[BaseException], ...]

    def run(self, collection_id: str, content_id: str, work_version: int | str) -> ProcessResult:
        repo = MediaUsageWorkRepository(self.conn)
        claimed = repo.claim_work(
            collection_id=collection_id,
            content_id=content_id,
            work_version=work_version,
            lease_duration_seconds=self.lease_seconds,
        )
        if claimed is None or claimed.lease is None:
            return ProcessResult(Outcome.CLAIM_LOST, collection_id, content_id, int(work_version))
        lease = claimed.lease
        entry = ContentEntry(claimed.collection_id, claimed.collection_slug, claimed.content_id)
        try:
            with self._keeping(claimed):
                code = self.refresh(self.conn, entry, self.limits, lease)
        except self.interrupts:
            self.conn.invalidate()
            return self._settle_failure(self.engine_repo, claimed, lease, ErrorCode.TIME_LIMIT)
        if code is None:
            if not repo.complete_work(**asdict(lease)):
                return _result(claimed, Outcome.SUPERSEDED)
            # Noted only after the deletion committed: were both in one transaction, the last
            # two completions of a collection could each see the other's row and neither
            # restore ``complete`` (the chaos test found this).
            coverage.record_incremental_success(
                self.conn, entry.collection_id, entry.collection_slug
            )
            return _result(claimed, Outcome.COMPLETED)
        # A refresh of an entry whose collection is gone fails; the item is then obsolete.
        if not is_registered(self.conn, entry.collection_id, entry.collection_slug):
            done = repo.complete_work(**asdict(lease))
            return _result(claimed, Outcome.OBSOLETE if done else Outcome.SUPERSEDED)
        return self._settle_failure(repo, claimed, lease, policy.work_error_code(code))

    def _settle_failure(
        self, repo: MediaUsageWorkRepository, claimed: WorkRecord, lease: Lease, code: ErrorCode
    ) -> ProcessResult:
        """Retry the item with backoff, or fail it for good (and say so on the coverage row)."""
        if policy.is_terminal(code, claimed.attempt_count):
            if not repo.fail_work(**asdict(lease), error_code=code):
                return _result(claimed, Outcome.SUPERSEDED, code)
            coverage.record_incremental_failure(
                repo.bind, claimed.collection_id, claimed.collection_slug, claimed.content_id,
                claimed.work_version, code,
            )  # fmt: skip
            return _result(claimed, Outcome.FAILED, code)
        delay = policy.retry_delay_seconds(claimed.attempt_count, self.rand)
        if repo.retry_work(**asdict(lease), retry_delay_seconds=delay, error_code=code):
            return _result(claimed, Outcome.RETRY, code)
        return _result(claimed, Outcome.SUPERSEDED, code)

    def _keeping(self, claimed: WorkRecord) -> AbstractContextManager[object]:
        if self.heartbeat is None:
            return nullcontext()
        return keeper.keeping(
            self.engine_repo,
            claimed,
            lease_seconds=self.lease_seconds,
            every_seconds=self.heartbeat.every_seconds,
            max_seconds=self.heartbeat.max_seconds,
        )


def _result(claimed: WorkRecord, outcome: Outcome, code: ErrorCode | None = None) -> ProcessResult:
    return ProcessResult(
        outcome, claimed.collection_id, claimed.content_id, claimed.work_version, code
    )
