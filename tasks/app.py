"""``tasks.app:app``, with every task of this project registered on it.

The app and its broker settings live in ``media_usage_worker.tasks.app``; the names this module
has always offered stay importable from here.
"""

import media_usage_worker.tasks  # noqa: F401  (registers the tasks on app)
from media_usage_worker.tasks.app import app, broker_transport, transport_options
from media_usage_worker.tasks.settings import (
    DEFAULT_BROKER_URL,
    broker_folder,
    broker_url,
    queue_name,
)

__all__ = [
    "DEFAULT_BROKER_URL",
    "app",
    "broker_folder",
    "broker_transport",
    "broker_url",
    "queue_name",
    "transport_options",
]
