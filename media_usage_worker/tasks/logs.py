"""Structured logs: one JSON object per line when ``MEDIA_USAGE_LOG_FORMAT=json``.

Celery sets up a worker's and beat's logging itself; once it has, every handler it installed
gets ``JsonFormatter``. A log line of this project that carries fields (an item's retry or
failure: collection, content id, error code, cause, ...) passes them under ``extra``'s
``media_usage`` key; they become top-level keys of the object, so a pipeline can filter on
``error_code`` without parsing the message.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from celery.signals import after_setup_logger, after_setup_task_logger

from media_usage_worker.domain.errors import InvalidSetting
from media_usage_worker.tasks import settings

# Keys every object has; a record's own fields never replace them.
_BASE_KEYS = ("time", "level", "logger", "message")


class JsonFormatter(logging.Formatter):
    """A log record as one line of JSON: time (UTC, ISO 8601), level, logger, message, the
    record's ``media_usage`` fields, the task's name and id when it runs in one, and the
    exception's traceback as ``exc_info``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "media_usage", None)
        if isinstance(fields, dict):
            entry.update({k: v for k, v in fields.items() if k not in _BASE_KEYS})
        for key in ("task_name", "task_id"):
            value = getattr(record, key, None)
            if value and value != "???":
                entry[key] = value
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def use_json_logs(logger: logging.Logger) -> None:
    """Give every handler of ``logger`` the JSON formatter."""
    formatter = JsonFormatter()
    for handler in logger.handlers:
        handler.setFormatter(formatter)


def _json_wanted() -> bool:
    try:
        return settings.log_format() == "json"
    except InvalidSetting:
        return False  # reported, and the process stopped, by settings.check_all


@after_setup_logger.connect
@after_setup_task_logger.connect
def _structured_logs(logger: logging.Logger, **_: object) -> None:
    if _json_wanted():
        use_json_logs(logger)
