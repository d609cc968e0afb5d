"""The tick's sweep for a lost coverage note: a worker killed between an item's completion and
its note leaves the collection ``stale`` with nothing left to do (both dialects)."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from repository.coverage import restore_settled_coverage
from repository.work import MediaUsageWorkRepository
from tests.acceptance.conftest import wait_for
from tests.support import SAMPLE_FIELDS, active_collection, status_row


@pytest.fixture
def posts(db: sa.Engine):
    collection = active_collection(db, "posts", SAMPLE_FIELDS)
    with db.begin() as conn:
        conn.execute(sa.text(
            "UPDATE _emdash_media_usage_index_status "
            "SET status = 'complete', reconciliation_required = 0"
        ))  # fmt: skip
    return collection


def _write(conn: sa.Connection, content_id: str) -> None:
    conn.execute(sa.text("INSERT INTO ec_posts (id) VALUES (:i)"), {"i": content_id})


def _complete_without_note(db: sa.Engine, collection_id: str, content_id: str) -> None:
    """What a worker killed right after its completion commit leaves behind."""
    repo = MediaUsageWorkRepository(db)
    claimed = repo.claim_work(
        collection_id=collection_id, content_id=content_id, work_version=1,
        lease_duration_seconds=60,
    )  # fmt: skip
    assert claimed is not None
    assert repo.complete_work(
        collection_id=collection_id, content_id=content_id, work_version=1,
        lease_token=claimed.lease_token,
    )  # fmt: skip


def test_a_lost_note_is_restored_and_only_once(db, posts) -> None:
    with db.begin() as conn:
        _write(conn, "e1")
    _complete_without_note(db, posts.id, "e1")
    assert status_row(db, posts.id)["status"] == "stale"

    assert restore_settled_coverage(db) == ["posts"]
    status = status_row(db, posts.id)
    assert status["status"] == "complete" and status["completed_at"]
    assert status["last_incremental_success_at"] is None  # the sweep is not an item's success
    assert restore_settled_coverage(db) == []


def test_nothing_is_restored_while_work_remains_or_a_reconciliation_is_due(db, posts) -> None:
    with db.begin() as conn:
        _write(conn, "e1")
        _write(conn, "e2")
    _complete_without_note(db, posts.id, "e1")
    assert restore_settled_coverage(db) == []  # e2 is still pending
    _complete_without_note(db, posts.id, "e2")
    with db.begin() as conn:
        conn.execute(sa.text(
            "UPDATE _emdash_media_usage_index_status SET reconciliation_required = 1"
        ))  # fmt: skip
    assert restore_settled_coverage(db) == []
    assert status_row(db, posts.id)["status"] == "stale"


def test_a_write_committing_during_the_sweep_keeps_coverage_stale(db, posts) -> None:
    """The write holds the status row (its trigger moved the epoch) while the sweep runs; on
    PostgreSQL the sweep has read the old epoch and waits on that row, so only the epoch CAS
    stops it from marking ``complete`` over the new pending item."""
    with db.begin() as conn:
        _write(conn, "e1")
    _complete_without_note(db, posts.id, "e1")
    writer = db.connect()
    writer.begin()
    _write(writer, "e2")
    restored: list[list[str]] = []
    sweep = threading.Thread(target=lambda: restored.append(restore_settled_coverage(db)))
    sweep.start()
    if db.dialect.name == "postgresql":
        wait_for(lambda: _waiting_on_a_lock(db), timeout=30, interval=0.05)
    writer.commit()
    writer.close()
    sweep.join(timeout=60)
    assert restored == [[]]
    assert status_row(db, posts.id)["status"] == "stale"


def _waiting_on_a_lock(db: sa.Engine) -> bool:
    with db.connect() as conn:
        return bool(conn.execute(sa.text(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )).scalar_one())  # fmt: skip
