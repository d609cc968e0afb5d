"""The work tasks: the beat tick that fans out due items, and the per-item task."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from celery import Task
from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy import Engine

from media_usage_worker.domain.errors import InvalidArgument, ItemsFailed
from media_usage_worker.domain.vocabulary import Outcome
from media_usage_worker.domain.work import checked_items
from media_usage_worker.pipeline.backfill import RangeRun
from media_usage_worker.pipeline.batch import BatchRun, Heartbeat
from media_usage_worker.pipeline.fan_out import due_read_budget, fan_out_due_work, run_tick
from media_usage_worker.pipeline.reconciliation import Reconciler, StepReport
from media_usage_worker.pipeline.settle import ProcessResult
from media_usage_worker.tasks import dispatch, settings
from media_usage_worker.tasks.app import media_usage_task
from media_usage_worker.tasks.engines import migrated_engine, report_waiting, waiting_for
from media_usage_worker.tasks.envelope import after_write_arguments, range_arguments
from media_usage_worker.tasks.names import TaskName
from media_usage_worker.tasks.ticks import beat_tick

log = logging.getLogger(__name__)
CAPTURE_INACTIVE = (
    "capture is not active, so no content write is queued: run media-usage activate once "
    "(docs/operations.md)"
)
# The soft time limit ends the refresh, never the worker: the item is retried (attempt + 1).
OUT_OF_TIME = (SoftTimeLimitExceeded,)
# How long a worker spends on a reconciliation its batch woke, before its next message.
RECONCILE_NOW_SECONDS = 2.0


@media_usage_task(TaskName.TICK, bind=True)
def tick(self: Task) -> dict[str, Any]:
    """Select due work page by page (up to the tick budget) and send it as messages."""
    return beat_tick(
        self, settings.tick_seconds(), waiting={"active": False, "dispatched": 0},
        event="task-media-usage-tick", run=_dispatch_due,
    )  # fmt: skip


def _dispatch_due(engine: Engine) -> tuple[dict[str, Any], bool]:
    """The tick's work: send due work as messages, as much as the queue's depth allows; the
    summary, and whether capture is active."""
    ttl = settings.dispatch_ttl_seconds()
    report = run_tick(
        engine,
        queued=dispatch.queued_messages,
        budget=settings.tick_budget(),
        max_queued=settings.max_queued(),
        batch_size=settings.batch_size(),
        send=lambda page: dispatch.send(page, ttl),
    )
    report_waiting(engine, None if report.active else CAPTURE_INACTIVE)
    return report.as_dict(), report.active


@media_usage_task(TaskName.PROCESS_WORK)
def process_work(collection_id: Any, content_id: Any, work_version: Any) -> dict[str, Any]:
    """Claim, refresh and complete (or retry/fail) one item: a batch of one, whose outcome is
    the result."""
    ran = _process(TaskName.PROCESS_WORK, [(collection_id, content_id, work_version)])
    if ran.skipped is not None:
        return {"outcome": Outcome.CLAIM_LOST.value, "reason": ran.skipped}
    (result,) = ran.results
    # The outcome is the task's result: Flower shows it from the task-succeeded event, so a
    # custom event per item would only double the event traffic. An item that failed for good
    # ends the task as a failure instead (see _reported).
    if result.outcome != Outcome.FAILED:
        return result.as_dict()
    failed = [[result.collection_id, result.content_id, str(result.error_code)]]
    return _reported({**result.as_dict(), "failed": failed}, failed)


@media_usage_task(TaskName.PROCESS_BATCH)
def process_batch(items: Any) -> dict[str, Any]:
    """Process up to 1,000 items (``[collection_id, content_id, work_version]`` each) through the
    same path as one; the result counts the outcomes and names the items that failed."""
    ran = _process(TaskName.PROCESS_BATCH, items if isinstance(items, list) else [])
    if ran.skipped is not None:
        return {"outcomes": {}, "reason": ran.skipped}
    failed = [r for r in ran.results if r.outcome == Outcome.FAILED]
    summary = {
        "items": len(ran.results),
        "outcomes": dict(Counter(str(r.outcome) for r in ran.results)),
        "failed": [[r.collection_id, r.content_id, str(r.error_code)] for r in failed],
    }
    return _reported(summary, failed)


@media_usage_task(TaskName.PROCESS_RANGE)
def process_range(collection_id: Any, range_id: Any) -> dict[str, Any]:
    """Claim and index one key range of a reconciliation's scan (docs/design.md §6,
    "Ranges"); the result says how it ended and how many entries went back as work items."""
    engine = migrated_engine()
    if engine is None:
        return {"outcome": Outcome.CLAIM_LOST.value, "reason": waiting_for()}
    try:
        _RANGE_ARGUMENTS([collection_id, range_id], {})
    except InvalidArgument as exc:
        log.warning("%s ignored an invalid message: %s", TaskName.PROCESS_RANGE.value, exc)
        return {"outcome": Outcome.CLAIM_LOST.value, "reason": "invalid message"}
    report = RangeRun(
        engine,
        settings.limits(),
        lease_seconds=settings.lease_seconds(),
        interrupts=OUT_OF_TIME,
        on_drained=_reconcile_now(engine),
    ).run(collection_id, range_id)
    if report.handed_back:
        top_up(engine)  # the entries handed back are work items: send them now
    return report.as_dict()


_RANGE_ARGUMENTS = range_arguments()


@dataclass(frozen=True)
class Processed:
    """The items' results; or, when nothing ran, why (``skipped``)."""

    results: list[ProcessResult] = field(default_factory=list)
    skipped: str | None = None


def _process(task: TaskName, items: Sequence[Sequence[object]]) -> Processed:
    """The items' results, or why nothing ran (the schema is not ready; an invalid message)."""
    engine = migrated_engine()
    if engine is None:
        return Processed(skipped=waiting_for())
    try:
        checked = checked_items(items)
    except InvalidArgument as exc:
        # Forged or corrupted message: rejected whole, nothing changed, never retried.
        log.warning("%s ignored an invalid message: %s", task.value, exc)
        return Processed(skipped="invalid message")
    lease = settings.lease_seconds()
    results = BatchRun(
        engine,
        settings.limits(),
        lease_seconds=lease,
        heartbeat=Heartbeat(every_seconds=lease / 3, max_seconds=settings.time_limits()[0]),
        interrupts=OUT_OF_TIME,
        on_drained=_reconcile_now(engine),
    ).run(checked)
    dispatch.release([(i.collection_id, i.content_id, i.work_version) for i in checked])
    if task == TaskName.PROCESS_BATCH:
        # Batches are sent only for a backlog: keep it flowing without waiting for a tick.
        top_up(engine)
    return Processed(results)


def _reconcile_now(engine: Engine) -> Callable[[], None]:
    """A reconcile tick's work, taken by this worker when its batch drained a collection under
    reconciliation (``BatchRun.on_drained``): a backfill is fed as fast as the workers drain it,
    and its last phases follow the drain at once."""

    def step() -> None:
        advance(engine, budget_seconds=RECONCILE_NOW_SECONDS)

    return step


def advance(engine: Engine, budget_seconds: float = 5.0) -> list[StepReport]:
    """One reconcile tick's steps; when it stopped at its budget with a step still due, a
    reconcile tick is sent at once to go on (the sources phase of a large collection is many
    steps, and would otherwise move one budget per beat interval)."""
    running = reconciler(engine)
    reports = running.tick(budget_seconds=budget_seconds)
    if running.more_due:
        dispatch.reconcile_soon()
    return reports


def reconciler(engine: Engine) -> Reconciler:
    """The reconciliation as the tasks run it: what a step enqueues is sent at once, not at the
    next tick, so the workers drain a backfill's pages as fast as they are written
    (docs/design.md, "Pacing")."""
    return Reconciler(
        engine,
        defer_seconds=settings.reconcile_defer_seconds(),
        on_enqueued=lambda: feed(engine),
        range_size=settings.batch_size(),
    )


def feed(engine: Engine) -> None:
    """Send what a reconciliation step queued: its key ranges, then due work items."""
    try:
        dispatch.send_ranges(engine)
    except Exception as exc:
        if isinstance(exc, OUT_OF_TIME):
            raise
        log.warning("could not send key ranges (the next reconcile tick will): %s", exc)
    top_up(engine)


def top_up(engine: Engine) -> int:
    """Send due work while the queue runs low (the tick's fan-out and queue-depth budget,
    without the rest of the tick); the number of items sent. A worker calls it after each batch
    and after enqueueing a reconciliation's pages, so a backlog larger than one tick's budget
    keeps the workers busy instead of waiting for the next tick. Never fails the task: the
    next tick sends what this could not."""
    try:
        budget = due_read_budget(
            dispatch.queued_messages(),
            budget=settings.tick_budget(),
            max_queued=settings.max_queued(),
            batch_size=settings.batch_size(),
        )
        if budget == 0:
            return 0
        ttl = settings.dispatch_ttl_seconds()
        return fan_out_due_work(engine, budget, lambda page: dispatch.send(page, ttl)).sent
    except Exception as exc:
        if isinstance(exc, OUT_OF_TIME):
            raise
        log.warning("could not send due work after a batch (the next tick will): %s", exc)
        return 0


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


@media_usage_task(TaskName.AFTER_WRITE)
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
