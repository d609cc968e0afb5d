"""``tasks.app:app`` (SPEC §3), with every task of this project registered on it."""

import media_usage_worker.tasks  # noqa: F401  (registers the tasks on app)
from media_usage_worker.tasks.app import app

__all__ = ["app"]
