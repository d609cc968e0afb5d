"""``media_usage.deletion_tick``: the back phases of collection deletions, in batches."""

from __future__ import annotations

from typing import Any

from celery import Task
from sqlalchemy import Engine

from media_usage_worker.pipeline.deletion import DeletionProcessor
from media_usage_worker.tasks import settings
from media_usage_worker.tasks.app import media_usage_task
from media_usage_worker.tasks.names import TaskName
from media_usage_worker.tasks.ticks import beat_tick


@media_usage_task(TaskName.DELETION_TICK, bind=True)
def deletion_tick(self: Task) -> dict[str, Any]:
    """Advance due collection deletions for a few seconds (each batch one transaction)."""
    return beat_tick(
        self, settings.reconcile_seconds(), waiting={"deletions": 0},
        event="task-media-usage-deletion", run=_advance,
    )  # fmt: skip


def _advance(engine: Engine) -> tuple[dict[str, Any], bool]:
    reports = DeletionProcessor(engine, lease_seconds=settings.deletion_lease_seconds()).tick()
    summary = {
        "deletions": len(reports),
        "steps": sum(r.steps for r in reports),
        "finished": sorted(r.collection_slug for r in reports if r.finished),
        "in_progress": {r.collection_slug: r.phase for r in reports if not r.finished},
    }
    return summary, bool(reports)
