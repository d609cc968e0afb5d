"""Everything Celery: the app, the beat tick, the per-item task and dispatch.

``celery -A tasks ...`` finds ``tasks.app`` (the Celery instance) through this package.
Importing the package registers every task. This package never writes SQL text.
"""

from tasks import reconcile, work  # noqa: F401  (registers the tasks on app)
from tasks.app import app

__all__ = ["app"]
