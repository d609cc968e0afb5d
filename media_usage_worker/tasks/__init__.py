"""Everything Celery: the app, the beat tick, the per-item task and dispatch.

Importing the package registers every task on ``app``; the top-level ``tasks`` package gives
them their fixed names (``celery -A tasks ...``). This package never writes SQL text.
"""

from media_usage_worker.tasks import deletion, reconciliation, work  # noqa: F401  (registers the tasks on app)
from media_usage_worker.tasks.app import app

__all__ = ["app"]
