"""The beat schedule (``tasks.app`` loads it; ``beat_schedule.beat_schedule`` is the same dict).

It lives in the package, not in the top-level ``beat_schedule`` module, so a host directory
holding a ``beat_schedule.py`` of its own cannot take its place when beat starts there.

No entry carries an expiry: Celery would judge it by the worker's clock against beat's, and a
beat host a few seconds behind would have every tick discarded. Ticks queued while the workers
were down arrive together; the first of each name runs and the rest return at once
(``dispatch.first_tick_in``, timed by the broker). Any number of beat replicas is harmless for
the same reason, and each tick works from the database's state, so no leader election is
needed.
"""

from __future__ import annotations

from typing import Any

from media_usage_worker.tasks import settings
from media_usage_worker.tasks.names import TaskName

# A bad value is refused when beat starts (settings.check_all); the import must not fail.
_tick = settings.or_default(settings.tick_seconds, 5)
_reconcile = settings.or_default(settings.reconcile_seconds, 10)
_queue = settings.or_default(settings.queue_name, settings.DEFAULT_QUEUE)

beat_schedule: dict[str, dict[str, Any]] = {
    "media-usage-tick": {
        "task": TaskName.TICK.value,
        "schedule": float(_tick),
        "options": {"queue": _queue},
    },
    "media-usage-reconcile": {
        "task": TaskName.RECONCILE_TICK.value,
        "schedule": float(_reconcile),
        "options": {"queue": _queue},
    },
    # Collection deletions' back phases, on the reconciliation's interval.
    "media-usage-deletion": {
        "task": TaskName.DELETION_TICK.value,
        "schedule": float(_reconcile),
        "options": {"queue": _queue},
    },
}
