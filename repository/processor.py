"""Process one work item end to end (facts sheet §7.2): claim, refresh, complete or retry/fail.

Plain Python over the repositories; the Celery task only calls ``process_work_item``. Every
step after the claim is fenced by the lease token and work version, so a stale message, a
duplicate, or a worker whose lease expired cannot change anything.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, Literal

import sqlalchemy as sa

from media_usage_worker.domain import policy
from media_usage_worker.domain.snapshots import ContentEntry
from media_usage_worker.domain.validation import split_usable
from media_usage_worker.domain.work import WorkRecord
from repository import coverage
from repository.db import transaction
from repository.heartbeat import keeper
from repository.identity import registered
from repository.refresh import refresh_entry
from repository.work import MediaUsageWorkRepository, live_lease_exists

Outcome = Literal["completed", "obsolete", "superseded", "claim_lost", "retry", "failed"]


@dataclass(frozen=True)
class ProcessResult:
    outcome: Outcome
    collection_id: str
    content_id: str
    work_version: int
    error_code: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def process_work_item(
    engine: sa.Engine,
    *,
    collection_id: str,
    content_id: str,
    work_version: int | str,
    limits: policy.Limits | None = None,
    lease_seconds: int = policy.LEASE_SECONDS,
    rand: Callable[[], float] = random.random,
    refresh: Callable[..., str | None] | None = None,
    heartbeat: Heartbeat | None = None,
    interrupts: tuple[type[BaseException], ...] = (),
) -> ProcessResult:
    """Run one item. Invalid arguments raise ``ValueError`` before anything is written.

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
        return _process(
            conn,
            MediaUsageWorkRepository(engine),
            collection_id=collection_id,
            content_id=content_id,
            work_version=work_version,
            limits=limits or policy.Limits(),
            lease_seconds=lease_seconds,
            rand=rand,
            refresh=refresh or partial(refresh_entry, reraise=interrupts),
            heartbeat=heartbeat,
            interrupts=interrupts,
        )


def _process(
    conn: sa.Connection,
    heartbeat_repo: MediaUsageWorkRepository,
    *,
    collection_id: str,
    content_id: str,
    work_version: int | str,
    limits: policy.Limits,
    lease_seconds: int,
    rand: Callable[[], float],
    refresh: Callable[..., str | None],
    heartbeat: Heartbeat | None,
    interrupts: tuple[type[BaseException], ...],
) -> ProcessResult:
    repo = MediaUsageWorkRepository(conn)
    claimed = repo.claim_work(
        collection_id=collection_id,
        content_id=content_id,
        work_version=work_version,
        lease_duration_seconds=lease_seconds,
    )
    version = int(work_version)
    if claimed is None:
        return ProcessResult("claim_lost", collection_id, content_id, version)
    lease: dict[str, Any] = {
        "collection_id": claimed.collection_id,
        "content_id": claimed.content_id,
        "work_version": claimed.work_version,
        "lease_token": claimed.lease_token,
    }
    entry = ContentEntry(claimed.collection_id, claimed.collection_slug, claimed.content_id)

    def result(outcome: Outcome, code: str | None = None) -> ProcessResult:
        return ProcessResult(outcome, collection_id, content_id, claimed.work_version, code)

    fence = [live_lease_exists(**lease)]
    # The renewal thread is the process's own, so it renews through the engine, never this conn.
    try:
        with _keeping(heartbeat_repo, claimed, lease_seconds, heartbeat):
            code = refresh(conn, entry, limits, fence)
    except interrupts:
        conn.invalidate()
        # The lease goes back through the engine: this connection is gone.
        return _settle_failure(heartbeat_repo, lease, claimed, policy.TIME_LIMIT, rand, result)
    if code is None:
        if not repo.complete_work(**lease):
            return result("superseded")
        # Noted only after the deletion committed: were both in one transaction, the last two
        # completions of a collection could each see the other's row and neither restore
        # ``complete`` (the chaos test found this).
        coverage.record_incremental_success(conn, entry.collection_id, entry.collection_slug)
        return result("completed")

    # A refresh of an entry whose collection is gone fails; the item is then obsolete.
    if not _collection_present(conn, entry):
        return result("obsolete" if repo.complete_work(**lease) else "superseded")
    return _settle_failure(repo, lease, claimed, policy.work_error_code(code), rand, result)


# Expired leases first (their holders died), then retries, then fresh work.
DUE_STATES = ("leased", "retry", "pending")
DUE_PAGE = 100


@dataclass(frozen=True)
class FanOut:
    seen: int  # due items read
    sent: int  # messages sent (items already in flight are not sent again)
    unusable: int  # items settled without a message (unusable content ids)


def fan_out_due_work(
    repo: MediaUsageWorkRepository,
    budget: int,
    send: Callable[[list[WorkRecord]], Sequence[object]],
) -> FanOut:
    """Read up to ``budget`` due items page by page and hand each page to ``send``.

    An item whose content id no message may carry is settled here instead of being sent.
    """
    seen = sent = unusable = 0
    for state in DUE_STATES:
        after = None
        while seen < budget:
            limit = min(DUE_PAGE, budget - seen)
            page = repo.find_due_page(state, limit, after)
            seen += len(page)
            usable, unusable_items = split_usable(page, lambda item: item.content_id)
            for item in unusable_items:
                settle_unusable_item(repo, item)
            unusable += len(unusable_items)
            sent += len(send(usable)) if usable else 0
            if len(page) < limit:
                break
            after = page[-1]
    return FanOut(seen, sent, unusable)


def settle_unusable_item(repo: MediaUsageWorkRepository, record: WorkRecord) -> str:
    """Fail (or drop, if its entry is gone) an item whose content id cannot be used.

    The tick calls this instead of sending a message that every worker would refuse: the item
    ends ``failed`` with ``MEDIA_USAGE_UNUSABLE_CONTENT_ID`` and coverage says ``partial``.
    """
    outcome = repo.settle_unusable_work(record, policy.UNUSABLE_CONTENT_ID)
    if outcome == "failed":
        coverage.record_incremental_failure(
            repo.bind, record.collection_id, record.collection_slug, record.content_id,
            record.work_version, policy.UNUSABLE_CONTENT_ID,
        )  # fmt: skip
    return outcome


def _settle_failure(
    repo: MediaUsageWorkRepository,
    lease: dict[str, Any],
    claimed: Any,
    work_code: str,
    rand: Callable[[], float],
    result: Callable[[Outcome, str | None], ProcessResult],
) -> ProcessResult:
    """Retry the item with backoff, or fail it for good (and say so on the coverage row)."""
    if policy.is_terminal(work_code, claimed.attempt_count):
        if not repo.fail_work(**lease, error_code=work_code):
            return result("superseded", work_code)
        coverage.record_incremental_failure(
            repo.bind, claimed.collection_id, claimed.collection_slug, claimed.content_id,
            claimed.work_version, work_code,
        )  # fmt: skip
        return result("failed", work_code)
    delay = policy.retry_delay_seconds(claimed.attempt_count, rand)
    if repo.retry_work(**lease, retry_delay_seconds=delay, error_code=work_code):
        return result("retry", work_code)
    return result("superseded", work_code)


@dataclass(frozen=True)
class Heartbeat:
    every_seconds: float
    max_seconds: float


def _keeping(
    repo: MediaUsageWorkRepository, claimed: Any, lease_seconds: int, heartbeat: Heartbeat | None
) -> AbstractContextManager[Any]:
    if heartbeat is None:
        return nullcontext()
    return keeper.keeping(
        repo,
        claimed,
        lease_seconds=lease_seconds,
        every_seconds=heartbeat.every_seconds,
        max_seconds=heartbeat.max_seconds,
    )


def _collection_present(conn: sa.Connection, entry: ContentEntry) -> bool:
    with transaction(conn):
        return bool(
            conn.execute(
                sa.select(registered(entry.collection_id, entry.collection_slug))
            ).scalar_one()
        )
