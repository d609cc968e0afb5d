"""The beat schedule, by its fixed name (docs/api.md): ``beat_schedule.beat_schedule``.

The dict is defined in ``media_usage_worker.tasks.schedule``, which the Celery app loads, so a
host directory with a ``beat_schedule.py`` of its own cannot replace this project's schedule.
"""

from media_usage_worker.tasks.schedule import beat_schedule

__all__ = ["beat_schedule"]
