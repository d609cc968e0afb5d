"""Custom task events, so Flower and other monitors see each item's and each tick's outcome."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task

log = logging.getLogger(__name__)


def emit(task: Task, event: str, fields: dict[str, Any]) -> None:
    """Send ``event`` with ``fields``; monitoring must never fail the task."""
    try:
        task.send_event(event, **fields)
    except Exception:
        log.debug("could not send %s event", event, exc_info=True)
