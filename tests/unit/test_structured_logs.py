"""MEDIA_USAGE_LOG_FORMAT=json: one JSON object per line, with the record's fields."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from media_usage_worker.domain.errors import InvalidSetting
from media_usage_worker.tasks import settings
from media_usage_worker.tasks.logs import JsonFormatter, use_json_logs


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord(
        "media_usage_worker.pipeline.batch", logging.WARNING, __file__, 1,
        "media usage item %s/%s will retry", ("posts", "e1"), None,
    )  # fmt: skip
    record.__dict__.update(extra)
    return record


def test_a_record_becomes_one_line_of_json_with_its_fields() -> None:
    fields = {"collection": "posts", "content_id": "e1", "error_code": "X", "message": "spoof"}
    line = JsonFormatter().format(_record(media_usage=fields, task_id="t-1", task_name="n"))

    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "WARNING"
    assert entry["logger"] == "media_usage_worker.pipeline.batch"
    # A field may not replace the base keys.
    assert entry["message"] == "media usage item posts/e1 will retry"
    assert (entry["collection"], entry["content_id"], entry["error_code"]) == ("posts", "e1", "X")
    assert (entry["task_id"], entry["task_name"]) == ("t-1", "n")
    assert entry["time"].endswith("+00:00")


def test_a_traceback_stays_inside_the_one_line() -> None:
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        record = _record(exc_info=sys.exc_info())
    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert "RuntimeError: boom" in json.loads(line)["exc_info"]


def test_use_json_logs_sets_every_handler() -> None:
    logger = logging.getLogger("test-structured-logs")
    handlers = [logging.StreamHandler(), logging.StreamHandler()]
    for handler in handlers:
        logger.addHandler(handler)
    try:
        use_json_logs(logger)
        assert all(isinstance(h.formatter, JsonFormatter) for h in handlers)
    finally:
        for handler in handlers:
            logger.removeHandler(handler)


def test_the_log_format_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEDIA_USAGE_LOG_FORMAT", raising=False)
    assert settings.log_format() == "text"
    monkeypatch.setenv("MEDIA_USAGE_LOG_FORMAT", "JSON")
    assert settings.log_format() == "json"
    monkeypatch.setenv("MEDIA_USAGE_LOG_FORMAT", "xml")
    with pytest.raises(InvalidSetting, match="MEDIA_USAGE_LOG_FORMAT must be one of text, json"):
        settings.check_all()


def test_a_failed_item_is_named_with_its_code_in_the_task_failure() -> None:
    """The failure Flower shows names each item that failed for good, whether the message
    carried one item or a batch."""
    import pickle

    from media_usage_worker.domain.errors import ItemsFailed

    one = ItemsFailed({"outcome": "failed", "failed": [["01JCOLL", "e1", "MEDIA_USAGE_X"]]})
    assert str(one) == "Work items of this message failed for good: 01JCOLL/e1 (MEDIA_USAGE_X)"
    two = ItemsFailed({"failed": [["c", "a", "E1"], ["c", "b", "E2"]]})
    assert str(two).endswith(": c/a (E1), c/b (E2)")
    assert str(pickle.loads(pickle.dumps(two))) == str(two)
    assert str(ItemsFailed({"failed": "garbage"})).endswith(": none named")
