"""The worker's consumer: every message is checked before Celery's strategy sees it.

Celery's own handling of a malformed message ranges from a logged body dump to an exception
that stops the consumer; with late acks the message is then restored and stops every worker
that receives it next. Here a message that ``domain.messages.check_message`` refuses is
acknowledged and dropped with one log line (reason and message id, never the body), counted, and
the consumer goes on. Accepted messages continue with cleaned headers and clamped time limits.

Installed by ``tasks.app`` as the ``worker_consumer``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from celery import bootsteps
from celery.worker.consumer import Consumer

from media_usage_worker.domain.errors import InvalidMessage
from media_usage_worker.tasks.envelope import (
    NO_ARGUMENTS,
    ArgumentCheck,
    TimeLimits,
    after_write_arguments,
    batch_arguments,
    check_message,
    item_arguments,
    range_arguments,
)
from media_usage_worker.tasks.names import TaskName

log = logging.getLogger("media_usage.messages")

# The argument checks of this project's tasks, by task name.
ARGUMENT_CHECKS: dict[str, ArgumentCheck] = {
    TaskName.TICK: NO_ARGUMENTS,
    TaskName.RECONCILE_TICK: NO_ARGUMENTS,
    TaskName.DELETION_TICK: NO_ARGUMENTS,
    TaskName.PROCESS_WORK: item_arguments(),
    TaskName.PROCESS_BATCH: batch_arguments(),
    TaskName.PROCESS_RANGE: range_arguments(),
    TaskName.AFTER_WRITE: after_write_arguments(),
}


class DroppedMessages:
    """How many messages this worker dropped, by reason (``celery inspect stats`` shows it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_reason: dict[str, int] = {}

    def add(self, reason: str) -> None:
        # Reasons quote task names an attacker chose; only the kind before the colon is counted.
        kind = reason.split(":", 1)[0].split(" '", 1)[0]
        with self._lock:
            self._by_reason[kind] = self._by_reason.get(kind, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            by_reason = dict(self._by_reason)
        return {"total": sum(by_reason.values()), "by_reason": by_reason}


dropped = DroppedMessages()


def message_label(headers: object) -> str:
    """The message id for the log, safe to print whatever the header held."""
    raw = headers.get("id") if isinstance(headers, dict) else None
    if not isinstance(raw, str):
        return "<none>"
    return ascii(raw[:80])[1:-1]


class GuardedConsumer(Consumer):
    """Celery's consumer, with ``check_message`` in front of every task handler."""

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        handle = super().create_task_handler(*args, **kwargs)
        conf = self.app.conf
        limits = TimeLimits(
            soft_seconds=float(conf.task_soft_time_limit or conf.task_time_limit or 3600),
            hard_seconds=float(conf.task_time_limit or 3600),
        )

        def on_task_received(message: Any) -> Any:
            try:
                accepted = check_message(
                    content_type=message.content_type,
                    content_encoding=message.content_encoding,
                    headers=message.headers,
                    body=message.body,
                    checks=ARGUMENT_CHECKS,
                    # This consumer is this project's app's, so everything it reads comes from
                    # this project's queue: only this project's tasks run. Celery's built-ins
                    # (celery.chord_unlock re-queues itself, celery.starmap runs any task
                    # many times) would let one forged message multiply.
                    known_tasks=(),
                    limits=limits,
                )
            except InvalidMessage as exc:
                return self._drop(message, str(exc))
            message.headers = accepted.headers
            try:
                return handle(message)
            except self.connection_errors:
                raise  # the broker went away: Celery reconnects, the message is redelivered
            except Exception as exc:  # whatever Celery could not take must not stop the worker
                return self._drop(message, f"celery refused it: {type(exc).__name__}")

        return on_task_received

    def _drop(self, message: Any, reason: str) -> None:
        dropped.add(reason)
        log.warning("dropped message id=%s: %s", message_label(message.headers), reason)
        message.ack_log_error(log, self.connection_errors)


class DroppedMessagesStats(bootsteps.StartStopStep):
    """Puts the dropped-message counts into ``celery inspect stats`` (``media_usage_dropped``)."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def info(self, consumer: Any) -> dict[str, Any]:
        return {"media_usage_dropped": dropped.snapshot()}
