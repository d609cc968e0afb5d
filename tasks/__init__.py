"""The fixed name of the Celery app (docs/api.md): ``celery -A tasks ...`` and ``tasks.app:app``.

The tasks live in ``media_usage_worker.tasks``; importing this package registers every one of
them on ``app``. Nothing inside ``media_usage_worker`` imports this package, so a host project
with a ``tasks.py`` of its own can still bind this project's tasks onto its app
(``media_usage_worker.tasks.binding.bind``).
"""

from tasks.app import app

__all__ = ["app"]
