"""``media_usage.deletion_tick``: the back phases of collection deletions, in batches."""

from __future__ import annotations

from typing import Any

from celery import Task

from media_usage_worker.pipeline.deletion import DeletionProcessor
from media_usage_worker.tasks import settings
from media_usage_worker.tasks.app import late_duplicate_tick, media_usage_task
from media_usage_worker.tasks.engines import migrated_engine, waiting_for
from media_usage_worker.tasks.events import emit
from media_usage_worker.tasks.names import TaskName


@media_usage_task(TaskName.DELETION_TICK, bind=True)
def deletion_tick(self: Task) -> dict[str, Any]:
    """Advance due collection deletions for a few seconds (each batch one transaction)."""
    skipped = late_duplicate_tick(self, settings.reconcile_seconds())
    if skipped is not None:
        return skipped
    engine = migrated_engine()
    if engine is None:
        return {"deletions": 0, "schema": waiting_for()}
    reports = DeletionProcessor(engine, lease_seconds=settings.deletion_lease_seconds()).tick()
    summary = {
        "deletions": len(reports),
        "steps": sum(r.steps for r in reports),
        "finished": sorted(r.collection_slug for r in reports if r.finished),
        "in_progress": {r.collection_slug: r.phase for r in reports if not r.finished},
    }
    if reports:
        emit(self, "task-media-usage-deletion", summary)
    return summary
