"""The beat schedule (imported by the Celery app).

Every entry expires after its own interval: a tick that could not run in time is dropped rather
than queued behind others, and the next one does the same work from the database's state. Any
number of beat replicas is harmless for the same reason, so no leader election is needed.
"""

from __future__ import annotations

import os


def _seconds(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    try:
        value = int(raw) if raw else default
    except ValueError:
        value = default
    return value if value >= 1 else default


_tick = _seconds("MEDIA_USAGE_TICK_SECONDS", 5)
_reconcile = _seconds("MEDIA_USAGE_RECONCILE_SECONDS", 10)
_queue = os.environ.get("MEDIA_USAGE_QUEUE", "media_usage")

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
}
