"""Content ids the database holds but this project cannot use, on both dialects.

A host may store an empty id, one longer than 1,024 characters, and on SQLite one with a NUL or
bytes that are not UTF-8. None of these may stop a tick, another collection or a rescan: each
ends as failed work with ``MEDIA_USAGE_UNUSABLE_CONTENT_ID``, and coverage says ``partial``.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from media_usage_worker.domain.errors import InvalidArgument
from media_usage_worker.domain.validation import is_usable_identifier
from media_usage_worker.domain.vocabulary import ErrorCode
from media_usage_worker.pipeline.capture import activate
from media_usage_worker.pipeline.reconciliation import Reconciler
from media_usage_worker.pipeline.repair import repair_collection
from media_usage_worker.repository.base.schema import work
from media_usage_worker.repository.registry.collections import CollectionRegistry
from media_usage_worker.repository.work_queue.work import MediaUsageWorkRepository
from tests.index_oracle import actual_index, expected_index
from tests.support import SAMPLE_FIELDS, drain, mark_coverage_complete, status_row

# SQL expressions for ids, so the test can also write what no Python string binds as.
PORTABLE = ["''", "'" + "x" * 1025 + "'"]
SQLITE_ONLY = ["CAST(x'ff' AS TEXT)", "CAST(x'61ff62' AS TEXT)", "'a' || char(0) || 'b'"]


def hostile_ids(engine: sa.Engine) -> list[str]:
    return PORTABLE + (SQLITE_ONLY if engine.dialect.name == "sqlite" else [])


def write_entries(engine: sa.Engine, slug: str, expressions: list[str]) -> None:
    with engine.begin() as conn:
        for expression in expressions:
            conn.execute(sa.text(f"INSERT INTO ec_{slug} (id, hero) VALUES ({expression}, 'm1')"))


def work_rows(engine: sa.Engine, collection_id: str) -> list[sa.Row]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(work.c.content_id, work.c.state, work.c.last_error_code).where(
                    work.c.collection_id == collection_id
                )
            )
        )


def failed_unusable(engine: sa.Engine, collection_id: str) -> list[str]:
    return [
        row.content_id
        for row in work_rows(engine, collection_id)
        if (row.state, row.last_error_code) == ("failed", ErrorCode.UNUSABLE_CONTENT_ID)
    ]


@pytest.fixture
def collections(db: sa.Engine):
    registry = CollectionRegistry(db)
    posts = registry.create_collection("posts", "Posts", SAMPLE_FIELDS)
    pages = registry.create_collection("pages", "Pages", SAMPLE_FIELDS)
    return posts, pages


def test_captured_unusable_ids_fail_without_stopping_other_work(db, collections) -> None:
    posts, pages = collections
    activate(db)
    mark_coverage_complete(db)  # as a finished reconciliation leaves it
    write_entries(db, "posts", [*hostile_ids(db), "'ok'"])
    write_entries(db, "pages", ["'fine'"])

    results = drain(db)

    assert sorted((r.content_id, r.outcome) for r in results) == [
        ("fine", "completed"),
        ("ok", "completed"),
    ]
    assert len(failed_unusable(db, posts.id)) == len(hostile_ids(db))
    assert all(not is_usable_identifier(i) for i in failed_unusable(db, posts.id))
    assert work_rows(db, pages.id) == []
    status = status_row(db, posts.id)
    assert (status["status"], status["last_error_code"]) == (
        "partial",
        ErrorCode.UNUSABLE_CONTENT_ID,
    )
    assert status_row(db, pages.id)["status"] == "complete"
    assert actual_index(db) == expected_index(db)


def test_the_operator_listing_pages_through_unusable_ids(db, collections) -> None:
    posts, _ = collections
    activate(db)
    write_entries(db, "posts", hostile_ids(db))
    drain(db)
    repo = MediaUsageWorkRepository(db)

    seen, cursor = [], None
    while True:
        page = repo.find_operator_page(collection_slug="posts", limit=1, cursor=cursor)
        seen += [item.content_id for item in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sorted(seen) == sorted(failed_unusable(db, posts.id))
    assert len(seen) == len(hostile_ids(db))
    # What an operator can type is refused with the validation message, not a traceback.
    with pytest.raises(InvalidArgument):
        repo.retry_operator_work(collection_id=posts.id, content_id="")


def test_deleting_the_entry_clears_its_failed_work(db, collections) -> None:
    posts, _ = collections
    activate(db)
    write_entries(db, "posts", hostile_ids(db))
    drain(db)
    assert failed_unusable(db, posts.id)

    with db.begin() as conn:  # the operator's fix: the host deletes (or renames) the rows
        conn.execute(sa.text("DELETE FROM ec_posts"))
    drain(db)

    assert work_rows(db, posts.id) == []


def _reconcile(engine: sa.Engine, collection_id: str) -> dict:
    reconciler = Reconciler(engine, defer_seconds=0)
    for _ in range(100):
        reconciler.tick()
        drain(engine)
        status = status_row(engine, collection_id)
        if status["status"] not in ("running", "never", "stale"):
            return status
    raise AssertionError(f"reconciliation did not settle: {status_row(engine, collection_id)}")


def test_a_rescan_that_finds_unusable_ids_ends_failed_work_and_partial(db, collections) -> None:
    posts, pages = collections
    write_entries(db, "posts", [*hostile_ids(db), "'ok'"])
    write_entries(db, "pages", ["'fine'"])
    activate(db)  # the entries predate capture: only the rescan finds them

    status = _reconcile(db, posts.id)

    assert status["status"] == "partial"
    assert status["last_error_code"] == ErrorCode.UNUSABLE_CONTENT_ID
    assert len(failed_unusable(db, posts.id)) == len(hostile_ids(db))
    assert _reconcile(db, pages.id)["status"] == "complete"
    with db.connect() as conn:
        states = set(
            conn.execute(sa.text("SELECT state FROM _emdash_media_usage_reconciliations")).scalars()
        )
    assert "running" not in states and "leased" not in states
    assert actual_index(db) == expected_index(db)


def test_repair_counts_unusable_ids_as_failed_and_keeps_their_work(db, collections) -> None:
    posts, _ = collections
    activate(db)
    write_entries(db, "posts", [*hostile_ids(db), "'ok'"])

    result = repair_collection(db, "posts")

    assert (result.status, result.error_code) == ("partial", ErrorCode.UNUSABLE_CONTENT_ID)
    assert (result.indexed, result.failed) == (1, len(hostile_ids(db)))
    assert status_row(db, posts.id)["status"] == "partial"
    assert len(failed_unusable(db, posts.id)) == len(hostile_ids(db))
    assert actual_index(db) == expected_index(db)
