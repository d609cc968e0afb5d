"""The beat schedule (``tasks.app`` loads it; ``beat_schedule.beat_schedule`` is the same dict).

It lives in the package, not in the top-level ``beat_schedule`` module, so a host directory
holding a ``beat_schedule.py`` of its own cannot take its place when beat starts there.

Every entry expires after its own interval: a tick that could not run in time is dropped rather
than queued behind others, and the next one does the same work from the database's state. Any
number of beat replicas is harmless for the same reason, so no leader election is needed.
"""

from __future__ import annotations

from media_usage_worker.tasks import settings

# A bad value is refused when beat starts (settings.check_all); the import must not fail.
_tick = settings.or_default(settings.tick_seconds, 5)
_reconcile = settings.or_default(settings.reconcile_seconds, 10)
_queue = settings.or_default(settings.queue_name, settings.DEFAULT_QUEUE)

beat_schedule: dict[str, dict] = {
    "media-usage-tick": {
        "task": "media_usage.tick",
        "schedule": float(_tick),
        "options": {"expires": float(_tick), "queue": _queue},
    },
    "media-usage-reconcile": {
        "task": "media_usage.reconcile_tick",
        "schedule": float(_reconcile),
        "options": {"expires": float(_reconcile), "queue": _queue},
    },
    # Collection deletions' back phases, on the reconciliation's interval.
    "media-usage-deletion": {
        "task": "media_usage.deletion_tick",
        "schedule": float(_reconcile),
        "options": {"expires": float(_reconcile), "queue": _queue},
    },
}
