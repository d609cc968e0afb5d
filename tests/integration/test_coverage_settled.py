"""The tick's sweep for a lost coverage note: a worker killed between an item's completion and
its note leaves the collection ``stale`` with nothing left to do (both dialects)."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from media_usage_worker.repository.reconciling.coverage import (
    note_lost_failures,
    restore_settled_coverage,
)
from tests.support import (
    SAMPLE_FIELDS,
    active_collection,
    complete_without_note,
    fail_without_note,
    mark_coverage_complete,
    status_row,
)


@pytest.fixture
def complete_posts(db: sa.Engine):
    collection = active_collection(db, "posts", SAMPLE_FIELDS)
    mark_coverage_complete(db)
    return collection


def _write(conn: sa.Connection, content_id: str) -> None:
    conn.execute(sa.text("INSERT INTO ec_posts (id) VALUES (:i)"), {"i": content_id})


def test_a_lost_note_is_restored_and_only_once(db, complete_posts) -> None:
    with db.begin() as conn:
        _write(conn, "e1")
    complete_without_note(db, complete_posts.id, "e1")
    assert status_row(db, complete_posts.id)["status"] == "stale"

    assert restore_settled_coverage(db) == ["posts"]
    status = status_row(db, complete_posts.id)
    assert status["status"] == "complete" and status["completed_at"]
    assert status["last_incremental_success_at"] is None  # the sweep is not an item's success
    assert restore_settled_coverage(db) == []


def test_nothing_is_restored_while_work_remains_or_a_reconciliation_is_due(
    db, complete_posts
) -> None:
    with db.begin() as conn:
        _write(conn, "e1")
        _write(conn, "e2")
    complete_without_note(db, complete_posts.id, "e1")
    assert restore_settled_coverage(db) == []  # e2 is still pending
    complete_without_note(db, complete_posts.id, "e2")
    with db.begin() as conn:
        conn.execute(sa.text(
            "UPDATE _emdash_media_usage_index_status SET reconciliation_required = 1"
        ))  # fmt: skip
    assert restore_settled_coverage(db) == []
    assert status_row(db, complete_posts.id)["status"] == "stale"


def test_a_sweep_during_an_open_write_neither_waits_nor_restores(db, complete_posts) -> None:
    """The write's trigger holds the status row (it moved the epoch) while the sweep runs. On
    PostgreSQL the sweep skips the locked row and returns at once: a tick never waits on a host
    transaction. On SQLite it waits for the write (one writer at a time) and then sees its
    work row. Either way coverage stays ``stale``."""
    with db.begin() as conn:
        _write(conn, "e1")
    complete_without_note(db, complete_posts.id, "e1")
    writer = db.connect()
    writer.begin()
    _write(writer, "e2")
    restored: list[list[str]] = []
    sweep = threading.Thread(target=lambda: restored.append(restore_settled_coverage(db)))
    sweep.start()
    try:
        if db.dialect.name == "postgresql":
            sweep.join(timeout=30)
            assert not sweep.is_alive(), "the sweep waited on the writer's row lock"
    finally:
        writer.commit()
        writer.close()
        sweep.join(timeout=60)
    assert restored == [[]]
    assert status_row(db, complete_posts.id)["status"] == "stale"
    assert restore_settled_coverage(db) == []  # e2's work row is there now


def test_a_lost_failure_note_is_made_partial_with_its_code_and_only_once(
    db, complete_posts
) -> None:
    with db.begin() as conn:
        _write(conn, "e1")
    fail_without_note(db, complete_posts.id, "e1", "MEDIA_USAGE_X")
    assert status_row(db, complete_posts.id)["status"] == "stale"

    assert note_lost_failures(db) == ["posts"]
    status = status_row(db, complete_posts.id)
    assert (status["status"], status["last_error_code"]) == ("partial", "MEDIA_USAGE_X")
    assert status["completed_at"] is None
    assert note_lost_failures(db) == []
    assert restore_settled_coverage(db) == []  # the failed row keeps complete away


def test_no_failure_is_noted_while_a_reconciliation_is_due(db, complete_posts) -> None:
    with db.begin() as conn:
        _write(conn, "e1")
    fail_without_note(db, complete_posts.id, "e1", "MEDIA_USAGE_X")
    with db.begin() as conn:
        conn.execute(sa.text(
            "UPDATE _emdash_media_usage_index_status SET reconciliation_required = 1"
        ))  # fmt: skip
    assert note_lost_failures(db) == []
    assert status_row(db, complete_posts.id)["status"] == "stale"


def test_a_failure_note_that_found_the_row_held_is_repaired_by_the_next_sweep(
    db, complete_posts
) -> None:
    """The race itself: the item's own note skips the status row another transaction holds."""
    if db.dialect.name == "sqlite":
        pytest.skip("SQLite has one writer: the note waits for the holder instead of skipping")
    from media_usage_worker.repository.reconciling.coverage import record_incremental_failure

    with db.begin() as conn:
        _write(conn, "e1")
    fail_without_note(db, complete_posts.id, "e1", "MEDIA_USAGE_X")
    holder = db.connect()
    holder.begin()
    holder.execute(sa.text("SELECT 1 FROM _emdash_media_usage_index_status FOR UPDATE"))
    try:
        record_incremental_failure(db, complete_posts.id, "posts", "e1", 1, "MEDIA_USAGE_X")
        assert note_lost_failures(db) == []  # the sweep does not wait on the holder either
    finally:
        holder.rollback()
        holder.close()
    assert status_row(db, complete_posts.id)["status"] == "stale"
    assert note_lost_failures(db) == ["posts"]
    assert status_row(db, complete_posts.id)["status"] == "partial"
