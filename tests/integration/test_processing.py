"""Processing one work item against real databases: lifecycle, races, failures, read side."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.policy import Limits
from media_usage_worker.domain.snapshots import ContentEntry
from media_usage_worker.pipeline.process import process_work_item
from media_usage_worker.pipeline.refresh import refresh_entry
from media_usage_worker.repository.index import projection, source_writes
from media_usage_worker.repository.index.usage import usage_count, usage_page
from media_usage_worker.repository.work_queue.work import MediaUsageWorkRepository
from tests.index_oracle import actual_index, expected_index
from tests.support import (
    GALLERY_FIELD,
    PAST,
    active_collection,
    drain,
    get_work,
    mark_coverage_complete,
    set_work,
    status_row,
)

FIELDS = [
    FieldDefinition("title", "Title", "string"),
    FieldDefinition("hero", "Hero", "image"),
    FieldDefinition("doc", "Doc", "file"),
    GALLERY_FIELD,
    FieldDefinition("body", "Body", "portableText"),
]


@pytest.fixture
def posts_with_media(db: sa.Engine):
    collection = active_collection(db, "posts", FIELDS)
    with db.begin() as conn:
        for media_id in ("m1", "m2", "m3", "m4"):
            conn.execute(
                sa.text(
                    "INSERT INTO media (id, filename, mime_type, storage_key) "
                    "VALUES (:i, 'f', 'image/png', 'k')"
                ),
                {"i": media_id},
            )
    return collection


def sql(engine: sa.Engine, statement: str, **params) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(statement), params)


def media_ids(engine: sa.Engine) -> dict[str, list[str]]:
    query = (
        "SELECT s.source_variant, u.media_id FROM _emdash_media_usage u "
        "JOIN _emdash_media_usage_sources s ON s.source_key = u.source_key "
        "AND s.current_generation = u.generation ORDER BY u.field_path"
    )
    result: dict[str, list[str]] = {}
    with engine.connect() as conn:
        for v, media_id in conn.execute(sa.text(query)):
            result.setdefault(v, []).append(media_id)
    return result


def test_images_of_a_gallery_block_are_indexed_and_found(db, posts_with_media) -> None:
    body = [
        {"_type": "block", "children": []},
        {"_type": "gallery", "images": [{"asset": {"_ref": "m2"}}, {"asset": {"_ref": "m3"}}]},
    ]
    sql(db, "INSERT INTO ec_posts (id, status, body) VALUES ('e1', 'published', :b)",
        b=json.dumps(body))  # fmt: skip
    drain(db)
    mark_coverage_complete(db)
    assert media_ids(db) == {"columns": ["m2", "m3"]}
    page = usage_page(db, "m3")
    (entry,) = page.entries
    paths = [o["field_path"] for s in entry.sources for o in s["occurrences"]]
    assert paths == ["body[1].images[1].asset._ref"]
    assert usage_count(db, "m3")[1] == 1


def test_one_entry_through_its_lifecycle(db, posts_with_media) -> None:
    sql(db, "INSERT INTO ec_posts (id, slug, title, hero) VALUES ('e1', 'hello', 'Hello', 'm1')")
    assert [r.outcome for r in drain(db)] == ["completed"]
    assert media_ids(db) == {"columns": ["m1"]}

    sql(db, "UPDATE ec_posts SET hero = 'm2', version = version + 1 WHERE id = 'e1'")
    drain(db)
    assert media_ids(db) == {"columns": ["m2"]}

    sql(
        db,
        "INSERT INTO revisions (id, collection, entry_id, data) VALUES ('r1', 'posts', 'e1', :d)",
        d=json.dumps({"hero": "m3", "_slug": "draft-slug"}),
    )
    sql(db, "UPDATE ec_posts SET draft_revision_id = 'r1' WHERE id = 'e1'")
    drain(db)
    assert media_ids(db) == {"columns": ["m2"], "draft_overlay": ["m3"]}
    # Unpublished entry with a draft: counts only through the draft.
    with db.connect() as conn:
        from media_usage_worker.repository.index.usage import usage_counts

        assert usage_counts(conn, ["m2", "m3"]) == {"m2": 0, "m3": 1}

    sql(
        db,
        "UPDATE ec_posts SET status = 'published', hero = 'm3', live_revision_id = 'r1', "
        "draft_revision_id = NULL, version = version + 1 WHERE id = 'e1'",
    )
    drain(db)
    assert media_ids(db) == {"columns": ["m3"]}

    sql(db, "UPDATE ec_posts SET deleted_at = '2026-01-01T00:00:00.000Z' WHERE id = 'e1'")
    drain(db)
    with db.connect() as conn:
        from media_usage_worker.repository.index.usage import usage_counts

        assert usage_counts(conn, ["m3"]) == {"m3": 0}  # trashed entries do not count
    page = usage_page(db, "m3")
    assert [(e.content_id, e.deleted_at) for e in page.entries] == [
        ("e1", "2026-01-01T00:00:00.000Z")
    ]

    sql(db, "DELETE FROM ec_posts WHERE id = 'e1'")
    drain(db)
    assert media_ids(db) == {}
    with db.connect() as conn:
        assert (
            conn.execute(sa.text("SELECT count(*) FROM _emdash_media_usage_sources")).scalar() == 0
        )
    assert get_work(db, posts_with_media.id, "e1") is None


def test_every_live_entry_has_a_columns_source_even_without_media(db, posts_with_media) -> None:
    sql(db, "INSERT INTO ec_posts (id, title) VALUES ('plain', 'no media here')")
    drain(db)
    with db.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT source_key, collection_id, identity_version, source_completeness "
                "FROM _emdash_media_usage_sources"
            )
        ).all()
    assert rows == [
        (f"content:{posts_with_media.id}:plain:columns", posts_with_media.id, 1, "complete")
    ]


def test_unchanged_projection_keeps_its_generation(db, posts_with_media) -> None:
    sql(db, "INSERT INTO ec_posts (id, hero) VALUES ('e1', 'm1')")
    drain(db)
    with db.connect() as conn:
        before = conn.execute(
            sa.text("SELECT current_generation, indexed_at FROM _emdash_media_usage_sources")
        ).one()
    sql(db, "UPDATE ec_posts SET version = version + 1, author_id = 'someone' WHERE id = 'e1'")
    assert [r.outcome for r in drain(db)] == ["completed"]
    with db.connect() as conn:
        after = conn.execute(
            sa.text("SELECT current_generation, indexed_at FROM _emdash_media_usage_sources")
        ).one()
        generations = (
            conn.execute(sa.text("SELECT DISTINCT generation FROM _emdash_media_usage"))
            .scalars()
            .all()
        )
    assert after == before and generations == [before[0]]


def test_an_older_read_finishing_last_cannot_overwrite_the_newer_result(
    db, posts_with_media
) -> None:
    sql(db, "INSERT INTO ec_posts (id, hero) VALUES ('e1', 'm1')")
    from media_usage_worker.pipeline.refresh import columns_to_read, media_urls, plan_refresh

    def read_snapshot():
        state = projection.read_entries(db, posts_with_media.id, "posts", ["e1"], columns_to_read)
        urls = media_urls(db, state)
        return plan_refresh(state.entries["e1"], state.fields, Limits(), None, urls=urls)

    old_write = read_snapshot()  # processor A reads version 1 (m1)
    sql(db, "UPDATE ec_posts SET hero = 'm2', version = version + 1 WHERE id = 'e1'")
    # Content moved on: A's promotion is refused even before anyone else wrote.
    assert source_writes.write_entry(db, old_write) is False
    assert media_ids(db) == {}
    drain(db)  # processor B indexes version 2 (m2)
    assert media_ids(db) == {"columns": ["m2"]}
    # A finishes last, with its stale read and stale observation: refused again.
    assert source_writes.write_entry(db, old_write) is False
    assert media_ids(db) == {"columns": ["m2"]}
    assert actual_index(db) == expected_index(db)


def test_a_fenced_worker_result_is_superseded(db, posts_with_media) -> None:
    sql(db, "INSERT INTO ec_posts (id, hero) VALUES ('e1', 'm1')")

    def write_again():
        # The host writes the entry after the worker read it, before its write.
        sql(db, "UPDATE ec_posts SET hero = 'm2', version = version + 1 WHERE id = 'e1'")

    result = process_work_item(
        db,
        collection_id=posts_with_media.id,
        content_id="e1",
        work_version=1,
        before_write=write_again,
    )
    assert result.outcome == "superseded"
    assert get_work(db, posts_with_media.id, "e1")["work_version"] == 2
    drain(db)
    assert media_ids(db) == {"columns": ["m2"]}


def test_a_broken_draft_retries_then_fails_and_coverage_is_partial(db, posts_with_media) -> None:
    sql(
        db,
        "INSERT INTO revisions (id, collection, entry_id, data) "
        "VALUES ('bad', 'posts', 'e1', 'not json')",
    )
    sql(db, "INSERT INTO ec_posts (id, hero, draft_revision_id) VALUES ('e1', 'm1', 'bad')")
    mark_coverage_complete(db)
    repo = MediaUsageWorkRepository(db)
    outcomes = []
    for attempt in range(5):
        (item,) = repo.find_due_work(10)
        assert item.attempt_count == attempt
        result = process_work_item(
            db, collection_id=posts_with_media.id, content_id="e1", work_version=item.work_version
        )
        outcomes.append((result.outcome, result.error_code))
        set_work(db, posts_with_media.id, "e1", next_attempt_at=PAST)  # time passes
    assert outcomes == [("retry", "MEDIA_USAGE_SNAPSHOT_FAILED")] * 4 + [
        ("failed", "MEDIA_USAGE_SNAPSHOT_FAILED")
    ]
    row = get_work(db, posts_with_media.id, "e1")
    assert (row["state"], row["attempt_count"]) == ("failed", 5)
    status = status_row(db, posts_with_media.id)
    assert (status["status"], status["last_error_code"]) == (
        "partial",
        "MEDIA_USAGE_SNAPSHOT_FAILED",
    )
    assert repo.find_due_work(10) == []
    assert media_ids(db) == {}  # nothing written for a broken snapshot


def test_retry_delays_follow_the_backoff(db, posts_with_media) -> None:
    sql(
        db,
        "INSERT INTO revisions (id, collection, entry_id, data) "
        "VALUES ('bad', 'posts', 'e1', '[]')",
    )
    sql(db, "INSERT INTO ec_posts (id, draft_revision_id) VALUES ('e1', 'bad')")
    # Both writes were captured (a revision is a write to its entry): the latest version.
    version = get_work(db, posts_with_media.id, "e1")["work_version"]
    result = process_work_item(
        db, collection_id=posts_with_media.id, content_id="e1", work_version=version,
        rand=lambda: 0.0,
    )  # fmt: skip
    assert result.outcome == "retry"
    with db.connect() as conn:
        seconds = conn.execute(
            sa.text("SELECT next_attempt_at, updated_at FROM _emdash_media_usage_work")
        ).one()
    from datetime import datetime

    parse = lambda t: datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%fZ")  # noqa: E731
    assert 29.9 <= (parse(seconds[0]) - parse(seconds[1])).total_seconds() <= 30.1


def test_resource_limit_fails_at_once(db, posts_with_media) -> None:
    gallery = json.dumps([{"image": f"m{i}"} for i in range(20)])
    sql(db, "INSERT INTO ec_posts (id, gallery) VALUES ('big', :g)", g=gallery)
    (result,) = drain(db, limits=Limits(max_occurrences=12))
    assert (result.outcome, result.error_code) == ("failed", "MEDIA_USAGE_RESOURCE_LIMIT")
    assert get_work(db, posts_with_media.id, "big")["attempt_count"] == 1
    sql(db, "INSERT INTO ec_posts (id, hero) VALUES ('small', 'm1')")
    (result,) = drain(db, limits=Limits(max_index_bytes=200))
    assert (result.outcome, result.error_code) == ("failed", "MEDIA_USAGE_RESOURCE_LIMIT")
    assert media_ids(db) == {}


def test_default_limits_take_a_real_page(db, posts_with_media) -> None:
    gallery = json.dumps([{"image": f"m{i}"} for i in range(500)])
    sql(db, "INSERT INTO ec_posts (id, gallery) VALUES ('big', :g)", g=gallery)
    assert [r.outcome for r in drain(db)] == ["completed"]
    assert len(actual_index(db)) == 500


def test_deleted_collection_makes_work_obsolete(db, posts_with_media) -> None:
    sql(db, "INSERT INTO ec_posts (id) VALUES ('e1')")
    sql(db, "UPDATE _emdash_collections SET slug = 'renamed'")
    result = process_work_item(
        db, collection_id=posts_with_media.id, content_id="e1", work_version=1
    )
    assert result.outcome == "obsolete"
    assert get_work(db, posts_with_media.id, "e1") is None


def test_success_restores_complete_coverage_only_when_drained(db, posts_with_media) -> None:
    mark_coverage_complete(db)
    sql(db, "INSERT INTO ec_posts (id) VALUES ('e1')")
    sql(db, "INSERT INTO ec_posts (id) VALUES ('e2')")
    assert status_row(db, posts_with_media.id)["status"] == "stale"
    process_work_item(db, collection_id=posts_with_media.id, content_id="e1", work_version=1)
    status = status_row(db, posts_with_media.id)
    assert status["status"] == "stale" and status["last_incremental_success_at"]
    process_work_item(db, collection_id=posts_with_media.id, content_id="e2", work_version=1)
    assert status_row(db, posts_with_media.id)["status"] == "complete"
    coverage, count = usage_count(db, "m1")
    assert coverage.status == "complete" and count == 0


def test_usage_is_unknown_until_coverage_is_complete(db, posts_with_media) -> None:
    sql(db, "INSERT INTO ec_posts (id, hero) VALUES ('e1', 'm1')")
    drain(db)
    coverage, count = usage_count(db, "m1")
    # The collection never reconciled (the empty sources are complete): "nowhere" is unknown.
    assert coverage.status == "partial" and count is None
    # An id without a media row is answered from the index like any other (one rule for
    # usage_page and usage_count): here it is referenced nowhere.
    page = usage_page(db, "nope")
    assert page.entries == [] and not page.in_library
    assert usage_page(db, "m1").in_library


def test_an_id_without_a_media_row_is_answered_from_the_index(db, posts_with_media) -> None:
    sql(db, "INSERT INTO ec_posts (id, hero) VALUES ('e1', 'gone-from-library')")
    drain(db)
    mark_coverage_complete(db)
    page = usage_page(db, "gone-from-library")
    assert [e.content_id for e in page.entries] == ["e1"] and not page.in_library
    assert usage_count(db, "gone-from-library")[1] == 1  # the same answer as the listing


def test_usage_listing_pages_by_entry(db, posts_with_media) -> None:
    for i in range(5):
        sql(
            db,
            "INSERT INTO ec_posts (id, hero, gallery) VALUES (:i, 'm1', :g)",
            i=f"e{i}",
            g=json.dumps([{"image": "m1"}]),
        )
    drain(db)
    first = usage_page(db, "m1", limit=2)
    assert [e.content_id for e in first.entries] == ["e0", "e1"] and first.next_cursor
    assert first.entries[0].sources == [
        {
            "variant": "columns",
            "occurrences": [
                {
                    "field_slug": "gallery",
                    "field_path": "gallery[0].image",
                    "occurrence_index": 0,
                    "reference_type": "image_field",
                },
                {
                    "field_slug": "hero",
                    "field_path": "hero",
                    "occurrence_index": 0,
                    "reference_type": "image_field",
                },
            ],
        }
    ]
    second = usage_page(db, "m1", limit=2, cursor=first.next_cursor)
    third = usage_page(db, "m1", limit=2, cursor=second.next_cursor)
    assert [e.content_id for e in second.entries + third.entries] == ["e2", "e3", "e4"]
    assert third.next_cursor is None
    with pytest.raises(ValueError):
        usage_page(db, "m1", cursor=first.next_cursor[:-2])


def test_process_validates_message_arguments_before_writing(db, posts_with_media) -> None:
    sql(db, "INSERT INTO ec_posts (id) VALUES ('e1')")
    before = get_work(db, posts_with_media.id, "e1")
    for bad in (
        {"work_version": "1; drop"},
        {"work_version": True},
        {"content_id": ""},
        {"collection_id": None},
        {"work_version": -1},
    ):
        args = {"collection_id": posts_with_media.id, "content_id": "e1", "work_version": 1} | bad
        with pytest.raises(ValueError):
            process_work_item(db, **args)
    assert get_work(db, posts_with_media.id, "e1") == before
    assert (
        process_work_item(
            db, collection_id=posts_with_media.id, content_id="e1", work_version=7
        ).outcome
        == "claim_lost"
    )


class OutOfTime(Exception):
    """Stands in for Celery's SoftTimeLimitExceeded, raised inside the refresh."""


def test_an_item_past_the_soft_limit_retries_with_an_attempt_more_then_fails(
    db, posts_with_media
) -> None:
    sql(db, "INSERT INTO ec_posts (id, hero) VALUES ('e1', 'm1')")
    mark_coverage_complete(db)

    def too_slow():
        # The entries were read, then the soft limit's signal arrived before the write.
        raise OutOfTime

    repo = MediaUsageWorkRepository(db)
    outcomes = []
    for attempt in range(5):
        (item,) = repo.find_due_work(10)
        assert item.attempt_count == attempt
        result = process_work_item(
            db, collection_id=posts_with_media.id, content_id="e1", work_version=item.work_version,
            before_write=too_slow, interrupts=(OutOfTime,),
        )  # fmt: skip
        outcomes.append((result.outcome, result.error_code))
        set_work(db, posts_with_media.id, "e1", next_attempt_at=PAST)  # time passes
    assert outcomes == [("retry", "MEDIA_USAGE_TIME_LIMIT")] * 4 + [
        ("failed", "MEDIA_USAGE_TIME_LIMIT")
    ]
    row = get_work(db, posts_with_media.id, "e1")
    assert (row["state"], row["attempt_count"], row["lease_token"]) == ("failed", 5, None)
    assert status_row(db, posts_with_media.id)["status"] == "partial"


def test_refresh_entry_lets_the_interrupt_through(db, posts_with_media) -> None:
    sql(db, "INSERT INTO ec_posts (id, hero) VALUES ('e1', 'm1')")
    entry = ContentEntry(posts_with_media.id, "posts", "e1")

    class Broken:  # any attribute access raises, as a signal mid-statement would
        def __getattr__(self, name):
            raise OutOfTime

    with pytest.raises(OutOfTime):
        refresh_entry(Broken(), entry, Limits(), reraise=(OutOfTime,))
    assert refresh_entry(Broken(), entry, Limits()) == "CONTENT_USAGE_REFRESH_ERROR"
