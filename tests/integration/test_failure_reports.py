"""Every retry and every terminal failure of an item is logged once, with its cause."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

from media_usage_worker.pipeline.process import process_work_item
from media_usage_worker.repository.work_queue.work import MediaUsageWorkRepository
from tests.support import PAST, SAMPLE_FIELDS, active_collection, broken_repeater_entry, set_work

LOGGER = "media_usage_worker.pipeline.batch"


def _run_attempts(db: sa.Engine, collection_id: str, content_id: str, attempts: int) -> list:
    repo = MediaUsageWorkRepository(db)
    outcomes = []
    for _ in range(attempts):
        (item,) = repo.find_due_work(10)
        result = process_work_item(
            db, collection_id=collection_id, content_id=content_id, work_version=item.work_version
        )
        outcomes.append(result.outcome)
        set_work(db, collection_id, content_id, next_attempt_at=PAST)  # time passes
    return outcomes


def test_a_broken_repeater_is_a_warning_per_retry_then_one_error(
    db: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    posts = broken_repeater_entry(db)
    caplog.set_level(logging.WARNING, logger=LOGGER)

    outcomes = _run_attempts(db, posts.id, "e1", 5)

    assert outcomes == ["retry"] * 4 + ["failed"]
    reports = [r for r in caplog.records if r.name == LOGGER]
    assert [r.levelno for r in reports] == [logging.WARNING] * 4 + [logging.ERROR]
    for attempt, record in enumerate(reports, start=1):
        fields = record.media_usage  # type: ignore[attr-defined]
        assert fields["collection"] == "posts"
        assert fields["content_id"] == "e1"
        assert fields["error_code"] == "MEDIA_USAGE_PROCESSING_FAILED"
        assert fields["attempt"] == attempt
        assert "FieldDiscoveryError" in fields["cause"], fields["cause"]
        message = record.getMessage()
        assert "posts/e1" in message and "MEDIA_USAGE_PROCESSING_FAILED" in message
    assert reports[0].media_usage["retry_in_seconds"] >= 30  # type: ignore[attr-defined]
    assert "failed for good" in reports[-1].getMessage()
    assert reports[-1].media_usage["retry_in_seconds"] is None  # type: ignore[attr-defined]


def test_a_broken_draft_names_its_cause(db: sa.Engine, caplog: pytest.LogCaptureFixture) -> None:
    posts = active_collection(db, "posts", SAMPLE_FIELDS)
    with db.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO revisions (id, collection, entry_id, data) "
                "VALUES ('bad', 'posts', 'e1', 'not json')"
            )
        )
        conn.execute(
            sa.text("INSERT INTO ec_posts (id, hero, draft_revision_id) VALUES ('e1', 'm1', 'bad')")
        )
    caplog.set_level(logging.WARNING, logger=LOGGER)

    assert _run_attempts(db, posts.id, "e1", 1) == ["retry"]

    (record,) = [r for r in caplog.records if r.name == LOGGER]
    assert record.media_usage["error_code"] == "MEDIA_USAGE_SNAPSHOT_FAILED"  # type: ignore[attr-defined]
    assert "draft revision is not a JSON object" in record.getMessage()


def test_a_completed_item_logs_nothing(db: sa.Engine, caplog: pytest.LogCaptureFixture) -> None:
    posts = active_collection(db, "posts", SAMPLE_FIELDS)
    with db.begin() as conn:
        conn.execute(sa.text("INSERT INTO ec_posts (id, hero) VALUES ('e1', 'm1')"))
    caplog.set_level(logging.DEBUG, logger=LOGGER)

    assert _run_attempts(db, posts.id, "e1", 1) == ["completed"]
    assert [r for r in caplog.records if r.name == LOGGER] == []
