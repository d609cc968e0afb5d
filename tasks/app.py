"""The one place that holds the Celery app and its configuration.

Only broker settings, which Celery needs to build the app, are read at import time; tasks read
the database URL and limits each time they run (``tasks.settings``).
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_process_init

from tasks import settings
from tasks.settings import queue_name

DEFAULT_BROKER_URL = "redis://localhost:6379/0"


def broker_url() -> str:
    return os.environ.get("MEDIA_USAGE_BROKER_URL", DEFAULT_BROKER_URL)


def broker_folder() -> str | None:
    """Where the server-less ``filesystem://`` broker keeps its files (the embedded demo)."""
    return os.environ.get("MEDIA_USAGE_BROKER_FOLDER") or None


def transport_options() -> dict[str, object]:
    options: dict[str, object] = {"visibility_timeout": settings.VISIBILITY_TIMEOUT_SECONDS}
    folder = broker_folder()
    if broker_url().startswith("filesystem://"):
        if folder is None:
            raise RuntimeError("The filesystem:// broker needs MEDIA_USAGE_BROKER_FOLDER.")
        queue = os.path.join(folder, "queue")
        control = os.path.join(folder, "control")
        for path in (queue, control):
            os.makedirs(path, exist_ok=True)
        # The transport polls its folder; at kombu's default of 1 s an idle consumer would wait
        # a second between messages.
        options.update(
            data_folder_in=queue,
            data_folder_out=queue,
            control_folder=control,
            polling_interval=0.02,
        )
    return options


def broker_transport() -> str | None:
    """The hardened Redis transport for Redis URLs (``tasks.transport``); kombu's otherwise."""
    scheme = broker_url().split("://", 1)[0].lower()
    return "tasks.transport:GuardedRedisTransport" if scheme in {"redis", "rediss"} else None


# Never the process's current or default app: importing this project (for ``after_write``,
# say) leaves a host's own app, and the shared tasks that bind to it, alone. The tasks are
# declared ``shared=False`` for the same reason: no other app is given them.
app = Celery("media_usage", include=["tasks.work", "tasks.reconcile"], set_as_current=False)
_hard_limit, _soft_limit = settings.time_limits()
app.conf.update(
    broker_url=broker_url(),
    broker_transport=broker_transport(),
    broker_connection_retry_on_startup=True,
    broker_transport_options=transport_options(),
    # JSON only: a message can never make a worker unpickle attacker-chosen objects.
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    result_accept_content=["json"],
    task_default_queue=queue_name(),
    task_routes={"media_usage.*": {"queue": queue_name()}},
    task_ignore_result=True,
    # Ack after the task ran, one message at a time: a killed worker's message is redelivered,
    # and the database lease (not the message) decides who may work on the item.
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_time_limit=_hard_limit,
    task_soft_time_limit=_soft_limit,
    worker_max_memory_per_child=settings.max_memory_per_child_kib(),
    worker_send_task_events=True,
    task_send_sent_event=True,
    timezone="UTC",
    enable_utc=True,
    # Every message is checked before Celery's strategy runs it (tasks.consumer).
    worker_consumer="tasks.consumer:GuardedConsumer",
    # Beat touches its liveness file on every pass, at least this often (tasks.beat).
    beat_scheduler="tasks.beat:LivenessScheduler",
    beat_max_loop_interval=30,
)
app.steps["consumer"].add("tasks.consumer:DroppedMessagesStats")


def _load_beat_schedule() -> None:
    from tasks.schedule import beat_schedule

    app.conf.beat_schedule = beat_schedule


_load_beat_schedule()


@worker_process_init.connect
def _fresh_engines_after_fork(**_: object) -> None:
    from tasks.engines import dispose_all

    dispose_all()
