"""The one place that holds the Celery app and its configuration.

Nothing is read from the environment at import time except the broker settings Celery itself
needs to build the app; tasks read the database URL each time they run.
"""

from __future__ import annotations

import os

from celery import Celery

DEFAULT_BROKER_URL = "redis://localhost:6379/0"
DEFAULT_QUEUE = "media_usage"


def queue_name() -> str:
    return os.environ.get("MEDIA_USAGE_QUEUE", DEFAULT_QUEUE)


app = Celery("media_usage")
app.conf.update(
    broker_url=os.environ.get("MEDIA_USAGE_BROKER_URL", DEFAULT_BROKER_URL),
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    result_accept_content=["json"],
    task_default_queue=queue_name(),
    task_routes={"media_usage.*": {"queue": queue_name()}},
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    worker_send_task_events=True,
    task_send_sent_event=True,
    timezone="UTC",
    enable_utc=True,
)
