"""The one place that holds the Celery app and its configuration.

Only the settings Celery needs to build the app are read at import time, and a bad one does not
fail the import (a host may import this for ``after_write``): a worker or beat that runs these
tasks checks every setting when it starts and stops with one line naming the bad ones
(``settings.check_all``). Tasks read the database URL and limits each time they run.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from celery import Celery
from celery.exceptions import SecurityWarning
from celery.signals import beat_init, celeryd_init, worker_process_init

from media_usage_worker.domain.errors import InvalidSetting, ItemsFailed
from media_usage_worker.tasks import logs, settings  # noqa: F401  (logs: its signal handlers)
from media_usage_worker.tasks.names import PREFIX, TaskName
from media_usage_worker.tasks.settings import broker_folder, broker_url


def transport_options() -> dict[str, object]:
    options: dict[str, object] = {"visibility_timeout": settings.VISIBILITY_TIMEOUT_SECONDS}
    folder = broker_folder()
    # Without a folder, settings.check_all refuses to start.
    if broker_url().startswith("filesystem://") and folder is not None:
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
    """The hardened transports: Redis (``tasks.transport``) and the server-less filesystem
    one (``tasks.filesystem_transport``); kombu's own otherwise."""
    scheme = broker_url().split("://", 1)[0].lower()
    if scheme in {"redis", "rediss"}:
        return "media_usage_worker.tasks.transport:GuardedRedisTransport"
    if scheme == "filesystem":
        return "media_usage_worker.tasks.filesystem_transport:GuardedFilesystemTransport"
    return None


# Never the process's current or default app: importing this project (for ``after_write``,
# say) leaves a host's own app, and the shared tasks that bind to it, alone. The tasks are
# declared ``shared=False`` for the same reason: no other app is given them.
app = Celery(
    "media_usage",
    include=[
        "media_usage_worker.tasks.work",
        "media_usage_worker.tasks.reconciliation",
        "media_usage_worker.tasks.deletion",
    ],
    set_as_current=False,
)
_DEFAULT_LIMITS = (settings.TASK_TIME_LIMIT_SECONDS, settings.TASK_SOFT_TIME_LIMIT_SECONDS)
_hard_limit, _soft_limit = settings.or_default(settings.time_limits, _DEFAULT_LIMITS)
_queue = settings.or_default(settings.queue_name, settings.DEFAULT_QUEUE)
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
    task_default_queue=_queue,
    task_routes={f"{PREFIX}*": {"queue": _queue}},
    task_ignore_result=True,
    # Ack after the task ran, one message at a time: a killed worker's message is redelivered,
    # and the database lease (not the message) decides who may work on the item.
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_time_limit=_hard_limit,
    task_soft_time_limit=_soft_limit,
    worker_max_memory_per_child=settings.or_default(
        settings.max_memory_per_child_kib, settings.MAX_MEMORY_PER_CHILD_KIB
    ),
    worker_send_task_events=True,
    task_send_sent_event=True,
    timezone="UTC",
    enable_utc=True,
    # Every message is checked before Celery's strategy runs it (tasks.consumer).
    worker_consumer="media_usage_worker.tasks.consumer:GuardedConsumer",
    # Beat touches its liveness file on every pass, at least this often (tasks.beat).
    beat_scheduler="media_usage_worker.tasks.beat:LivenessScheduler",
    beat_max_loop_interval=30,
)
app.steps["consumer"].add("media_usage_worker.tasks.consumer:DroppedMessagesStats")


def _load_beat_schedule() -> None:
    from media_usage_worker.tasks.schedule import beat_schedule

    app.conf.beat_schedule = beat_schedule


_load_beat_schedule()


F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class TaskSpec:
    """One task of this project, as registered on ``app`` and by ``binding.bind`` on a host's."""

    name: str
    run: Callable[..., Any]
    bind: bool


TASKS: list[TaskSpec] = []


def task_options() -> dict[str, Any]:
    """What every task of this project is registered with, on this app or a host's.

    Late acknowledgement and the time limits are per task as well as in ``app.conf``, so they
    hold in a host's worker whatever its own defaults are; results are never stored.
    """
    hard, soft = settings.or_default(settings.time_limits, _DEFAULT_LIMITS)
    return {
        "ignore_result": True,
        "shared": False,
        "acks_late": True,
        "reject_on_worker_lost": True,
        "time_limit": hard,
        "soft_time_limit": soft,
        # A message whose items failed for good ends FAILURE (tasks.work): expected, so Celery
        # logs it in one line, no traceback; the items' own log lines say why.
        "throws": (ItemsFailed,),
    }


def media_usage_task(name: TaskName, *, bind: bool = False) -> Callable[[F], Any]:
    """The one decorator of this project's tasks: registers ``run`` on ``app`` under ``name``
    and remembers it, so ``binding.bind`` can give the same task to a host's app."""

    def register(run: F) -> Any:
        TASKS.append(TaskSpec(name.value, run, bind))
        return app.task(name=name.value, bind=bind, **task_options())(run)

    return register


def _refuse_bad_settings(running: Celery) -> None:
    """Stop a worker or beat that runs this project's tasks (on this app or a host's it was
    bound onto) when a setting is bad: one line on stderr naming each, exit status 1."""
    if TaskName.TICK not in running.tasks:
        return  # a host's own worker or beat, which runs none of these tasks
    try:
        settings.check_all()
    except InvalidSetting as exc:
        raise SystemExit(f"media-usage: {exc}") from None
    if os.name == "posix" and os.geteuid() == 0:
        # Celery's own warning is eight lines; messages are JSON only, so the risk it names
        # (unpickling as root) is not taken, but a worker should still not run as root.
        warnings.filterwarnings(
            "ignore", message="You're running the worker with superuser", category=SecurityWarning
        )
        print(
            "media-usage: running as root; run workers and beat as an unprivileged user "
            "(the Docker image does; --uid, or your service manager's User=).",
            file=sys.stderr,
            flush=True,
        )
    if not os.environ.get("MEDIA_USAGE_BROKER_URL"):
        # Celery would retry its default for ever, naming only a transport class.
        print(
            f"media-usage: MEDIA_USAGE_BROKER_URL is not set, so this connects to "
            f"{settings.DEFAULT_BROKER_URL}; set it to your broker's URL (redis://host:6379/0, "
            "or filesystem:// with MEDIA_USAGE_BROKER_FOLDER).",
            file=sys.stderr,
            flush=True,
        )


@celeryd_init.connect
def _check_settings_before_the_worker_starts(instance: Any, **_: object) -> None:
    _refuse_bad_settings(instance.app)


@beat_init.connect
def _check_settings_before_beat_starts(sender: Any, **_: object) -> None:
    _refuse_bad_settings(sender.app)


@worker_process_init.connect
def _fresh_engines_after_fork(**_: object) -> None:
    from media_usage_worker.tasks.engines import dispose_all

    dispose_all()


def __getattr__(name: str) -> Any:
    # ``late_duplicate_tick`` lives in ``tasks.ticks`` now (importing it here at the top would
    # bring back the cycle through ``dispatch``); the old import keeps working.
    if name == "late_duplicate_tick":
        from media_usage_worker.tasks.ticks import late_duplicate_tick

        return late_duplicate_tick
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
