"""``media_usage.reconcile_tick``: bounded reconciliation work on its own beat entry."""

from __future__ import annotations

from collections import Counter
from typing import Any

from celery import Task
from sqlalchemy import Engine

from media_usage_worker.domain.vocabulary import ReconciliationAction
from media_usage_worker.tasks import settings
from media_usage_worker.tasks.app import media_usage_task
from media_usage_worker.tasks.names import TaskName
from media_usage_worker.tasks.ticks import beat_tick
from media_usage_worker.tasks.work import advance, feed


@media_usage_task(TaskName.RECONCILE_TICK, bind=True)
def reconcile_tick(self: Task) -> dict[str, Any]:
    """Advance every collection that needs reconciling by a bounded number of pages."""
    return beat_tick(
        self, settings.reconcile_seconds(), waiting={"steps": 0},
        event="task-media-usage-reconcile", run=_advance,
    )  # fmt: skip


def _advance(engine: Engine) -> tuple[dict[str, Any], bool]:
    reports = advance(engine)
    # Also sends the key ranges whose message or holder was lost.
    feed(engine)
    summary = {
        "steps": len(reports),
        "pages_enqueued": sum(1 for r in reports if r.action == ReconciliationAction.ENQUEUED),
        "ids_enqueued": sum(r.enqueued for r in reports),
        "actions": dict(Counter(str(r.action) for r in reports)),
        "collections": sorted({r.collection_slug for r in reports}),
    }
    return summary, True
