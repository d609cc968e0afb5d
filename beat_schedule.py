"""The beat schedule, imported by the Celery app. Entries are added by their issues."""

from __future__ import annotations

beat_schedule: dict[str, dict] = {}
