"""What every beat tick does around its work: skip a late duplicate, wait for the schema, run
the pipeline's tick and publish its summary as a Flower event."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from celery import Task

from media_usage_worker.tasks import dispatch
from media_usage_worker.tasks.engines import migrated_engine, waiting_for
from media_usage_worker.tasks.events import emit


def late_duplicate_tick(task: Any, interval_seconds: float) -> dict[str, Any] | None:
    """``{"skipped": ...}`` when a tick of ``task``'s name already ran in the last half interval
    (ticks queued while the workers were down); ``None`` to go on. A direct call
    (``.apply()``) always goes on."""
    if task.request.is_eager or dispatch.first_tick_in(task.name, interval_seconds):
        return None
    return {"skipped": "another tick of this name ran within half its interval"}


def beat_tick(
    task: Task,
    interval_seconds: float,
    *,
    waiting: dict[str, Any],
    event: str,
    run: Callable[[sa.Engine], tuple[dict[str, Any], bool]],
) -> dict[str, Any]:
    """``run`` over the migrated engine: its summary is the task's result, and the ``event``
    when it says so. Before the schema is ready, ``waiting`` with what it waits for."""
    skipped = late_duplicate_tick(task, interval_seconds)
    if skipped is not None:
        return skipped
    engine = migrated_engine()
    if engine is None:
        return {**waiting, "schema": waiting_for()}
    summary, publish = run(engine)
    if publish:
        emit(task, event, summary)
    return summary
