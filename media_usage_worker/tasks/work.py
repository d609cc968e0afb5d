"""The work tasks: the beat tick that fans out due items, and the per-item task."""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

from celery import Task
from celery.exceptions import SoftTimeLimitExceeded

from media_usage_worker.domain.errors import InvalidArgument, ItemsFailed
from media_usage_worker.domain.messages import after_write_arguments
from media_usage_worker.domain.policy import Limits
from media_usage_worker.domain.timestamps import seconds_between
from media_usage_worker.domain.vocabulary import Outcome
from media_usage_worker.domain.work import checked_items
from media_usage_worker.pipeline.batch import BatchRun
from media_usage_worker.pipeline.fan_out import due_read_budget, fan_out_due_work
from media_usage_worker.pipeline.process import Heartbeat, process_work_item
from media_usage_worker.pipeline.reconciliation import Reconciler
from media_usage_worker.repository import coverage
from media_usage_worker.repository.activation import is_activation_active
from media_usage_worker.repository.db import read_transaction
from media_usage_worker.repository.work import MediaUsageWorkRepository
from media_usage_worker.tasks import dispatch, settings
from media_usage_worker.tasks.app import late_duplicate_tick, media_usage_task
from media_usage_worker.tasks.engines import migrated_engine, report_waiting, waiting_for
from media_usage_worker.tasks.events import emit

log = logging.getLogger(__name__)
CAPTURE_INACTIVE = (
    "capture is not active, so no content write is queued: run media-usage activate once "
    "(docs/operations.md)"
)
# The soft time limit ends the refresh, never the worker: the item is retried (attempt + 1).
OUT_OF_TIME = (SoftTimeLimitExceeded,)
# How long a worker spends on a reconciliation its batch woke, before its next message.
RECONCILE_NOW_SECONDS = 2.0


@media_usage_task("media_usage.tick", bind=True)
def tick(self: Task) -> dict[str, Any]:
    """Select due work page by page (up to the tick budget) and send one message per item."""
    skipped = late_duplicate_tick(self, settings.tick_seconds())
    if skipped is not None:
        return skipped
    started = time.monotonic()
    engine = migrated_engine()
    if engine is None:
        return {"active": False, "dispatched": 0, "schema": waiting_for()}
    with read_transaction(engine) as conn:
        active = is_activation_active(conn)
    report_waiting(engine, None if active else CAPTURE_INACTIVE)
    if not active:
        return {"active": False, "dispatched": 0}
    repo = MediaUsageWorkRepository(engine)
    ttl = settings.dispatch_ttl_seconds()
    queued = dispatch.queued_messages()
    budget = due_read_budget(
        queued,
        budget=settings.tick_budget(),
        max_queued=settings.max_queued(),
        batch_size=settings.batch_size(),
    )
    fanned = fan_out_due_work(repo, budget, lambda page: dispatch.send(page, ttl))
    now, oldest = repo.oldest_due()
    # A worker killed between an item's completion and its coverage note leaves the collection
    # stale with nothing left to do; the tick is what still runs.
    restored = coverage.restore_settled_coverage(engine)
    summary = {
        "active": True,
        "due_seen": fanned.seen,
        "dispatched": fanned.sent,
        "unusable_settled": fanned.unusable,
        "queued_before": queued,
        "budget_exhausted": budget > 0 and fanned.seen >= budget,
        "coverage_restored": restored,
        "oldest_due_age_seconds": round(seconds_between(oldest, now), 3) if oldest else 0.0,
        "duration_ms": round((time.monotonic() - started) * 1000, 1),
    }
    emit(self, "task-media-usage-tick", summary)
    return summary


@media_usage_task("media_usage.process_work")
def process_work(collection_id: Any, content_id: Any, work_version: Any) -> dict[str, Any]:
    """Claim, refresh and complete (or retry/fail) one item; the outcome is the result."""
    engine = migrated_engine()
    if engine is None:
        return {"outcome": "claim_lost", "reason": waiting_for()}
    lease = settings.lease_seconds()
    try:
        result = process_work_item(
            engine,
            collection_id=collection_id,
            content_id=content_id,
            work_version=work_version,
            limits=Limits.from_env(),
            lease_seconds=lease,
            heartbeat=Heartbeat(
                every_seconds=lease / 3,
                max_seconds=settings.time_limits()[0],
            ),
            interrupts=OUT_OF_TIME,
            on_drained=_reconcile_now(engine),
        ).as_dict()
    except InvalidArgument as exc:
        # Forged or corrupted message: say so once, change nothing, never retry it.
        log.warning("media_usage.process_work ignored an invalid message: %s", exc)
        result = {"outcome": "claim_lost", "reason": "invalid message"}
    else:
        dispatch.release([(collection_id, content_id, work_version)])
    # The outcome is the task's result: Flower shows it from the task-succeeded event, so a
    # custom event per item would only double the event traffic. An item that failed for good
    # ends the task as a failure instead (see _reported).
    return _reported(result, [result] if result.get("outcome") == Outcome.FAILED else [])


@media_usage_task("media_usage.process_batch")
def process_batch(items: Any) -> dict[str, Any]:
    """Process up to 100 items (``[collection_id, content_id, work_version]`` each) through the
    same path as one; the result counts the outcomes and names the items that failed."""
    engine = migrated_engine()
    if engine is None:
        return {"outcomes": {}, "reason": waiting_for()}
    try:
        checked = checked_items(items if isinstance(items, list) else [])
    except InvalidArgument as exc:
        # Forged or corrupted message: rejected whole, nothing changed, never retried.
        log.warning("media_usage.process_batch ignored an invalid message: %s", exc)
        return {"outcomes": {}, "reason": "invalid message"}
    lease = settings.lease_seconds()
    results = BatchRun(
        engine,
        Limits.from_env(),
        lease_seconds=lease,
        heartbeat=Heartbeat(every_seconds=lease / 3, max_seconds=settings.time_limits()[0]),
        interrupts=OUT_OF_TIME,
        on_drained=_reconcile_now(engine),
    ).run(checked)
    dispatch.release([(i.collection_id, i.content_id, i.work_version) for i in checked])
    failed = [r for r in results if r.outcome == Outcome.FAILED]
    summary = {
        "items": len(checked),
        "outcomes": dict(Counter(str(r.outcome) for r in results)),
        "failed": [[r.collection_id, r.content_id, str(r.error_code)] for r in failed],
    }
    return _reported(summary, failed)


def _reconcile_now(engine: Any) -> Any:
    """A reconcile tick's work, taken by this worker when its batch drained a collection under
    reconciliation (``BatchRun.on_drained``): a backfill is fed as fast as the workers drain it,
    and its last phases follow the drain at once."""

    def step() -> None:
        Reconciler(engine, defer_seconds=settings.reconcile_defer_seconds()).tick(
            budget_seconds=RECONCILE_NOW_SECONDS
        )

    return step


def _reported(summary: dict[str, Any], failed: list[Any]) -> dict[str, Any]:
    """The task's result, or ``ItemsFailed`` carrying it when an item failed for good.

    Monitors filter by task state, and Celery's convention for "this task's work failed" is an
    exception: the task ends FAILURE in Flower, with the summary in the exception. The database
    already holds every outcome, so nothing is retried: with late acks Celery acknowledges a
    message whose task raised, and ``ItemsFailed`` is declared expected (logged without a
    traceback; the items' own ERROR lines say why).
    """
    if failed:
        raise ItemsFailed(summary)
    return summary


_AFTER_WRITE_ARGUMENTS = after_write_arguments()


@media_usage_task("media_usage.after_write")
def after_write(collection_slug: Any, content_id: Any) -> dict[str, Any]:
    """A host's content write, sent by name (``send_task``) from an app that does not import
    this project: send its item now, as ``tasks.dispatch.after_write`` does in the host."""
    try:
        _AFTER_WRITE_ARGUMENTS([collection_slug, content_id], {})
    except InvalidArgument as exc:
        # The consumer drops such messages first; a direct call gets the same answer.
        log.warning("media_usage.after_write ignored an invalid message: %s", exc)
        return {"dispatched": None, "reason": "invalid message"}
    return {"dispatched": dispatch.after_write(collection_slug, content_id)}
