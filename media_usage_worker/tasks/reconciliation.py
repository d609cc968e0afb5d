"""``media_usage.reconcile_tick``: bounded reconciliation work on its own beat entry."""

from __future__ import annotations

from collections import Counter
from typing import Any

from celery import Task

from media_usage_worker.domain.vocabulary import ReconciliationAction
from media_usage_worker.pipeline.reconciliation import Reconciler
from media_usage_worker.tasks import settings
from media_usage_worker.tasks.app import late_duplicate_tick, media_usage_task
from media_usage_worker.tasks.engines import migrated_engine, waiting_for
from media_usage_worker.tasks.events import emit
from media_usage_worker.tasks.names import TaskName


@media_usage_task(TaskName.RECONCILE_TICK, bind=True)
def reconcile_tick(self: Task) -> dict[str, Any]:
    """Advance every collection that needs reconciling by a bounded number of pages."""
    skipped = late_duplicate_tick(self, settings.reconcile_seconds())
    if skipped is not None:
        return skipped
    engine = migrated_engine()
    if engine is None:
        return {"steps": 0, "schema": waiting_for()}
    reports = Reconciler(engine, defer_seconds=settings.reconcile_defer_seconds()).tick()
    summary = {
        "steps": len(reports),
        "pages_enqueued": sum(1 for r in reports if r.action == ReconciliationAction.ENQUEUED),
        "ids_enqueued": sum(r.enqueued for r in reports),
        "actions": dict(Counter(str(r.action) for r in reports)),
        "collections": sorted({r.collection_slug for r in reports}),
    }
    emit(self, "task-media-usage-reconcile", summary)
    return summary
