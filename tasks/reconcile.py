"""``media_usage.reconcile_tick``: bounded reconciliation work on its own beat entry."""

from __future__ import annotations

from collections import Counter
from typing import Any

from celery import Task

from media_usage_worker.pipeline.reconciliation import Reconciler
from tasks import settings
from tasks.app import app
from tasks.engines import migrated_engine
from tasks.events import emit


@app.task(name="media_usage.reconcile_tick", bind=True, ignore_result=True, shared=False)
def reconcile_tick(self: Task) -> dict[str, Any]:
    """Advance every collection that needs reconciling by a bounded number of pages."""
    engine = migrated_engine()
    if engine is None:
        return {"steps": 0, "schema": "not migrated"}
    reports = Reconciler(
        engine, defer_seconds=settings.positive_int("MEDIA_USAGE_RECONCILE_DEFER_SECONDS", 5)
    ).tick()
    summary = {
        "steps": len(reports),
        "pages_enqueued": sum(1 for r in reports if r.action == "enqueued"),
        "ids_enqueued": sum(r.enqueued for r in reports),
        "actions": dict(Counter(r.action for r in reports)),
        "collections": sorted({r.collection_slug for r in reports}),
    }
    emit(self, "task-media-usage-reconcile", summary)
    return summary
