"""The chaos audit itself must be able to fail: a write without a live claimed lease is stale."""

from __future__ import annotations

import sqlalchemy as sa

from tests.chaos import audit
from tests.support import FUTURE, PAST, SAMPLE_FIELDS, active_collection, insert_work, set_work


def _write_source(db: sa.Engine, collection, key: str) -> None:
    with db.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO _emdash_media_usage_sources (source_key, source_type, collection_id,"
                " collection_slug, content_id, source_variant, current_generation) "
                "VALUES (:k, 'content', :c, 'posts', 'e1', 'columns', 'g1')"
            ),
            {"k": key, "c": collection.id},
        )


def test_only_writes_under_a_live_claimed_lease_pass(db: sa.Engine) -> None:
    posts = active_collection(db, "posts", SAMPLE_FIELDS)
    audit.install(db)
    insert_work(db, posts, "e1")
    # A claim as the repository makes it: the audit records the token it issued.
    set_work(db, posts.id, "e1", state="leased", lease_token="t1", lease_expires_at=FUTURE)
    _write_source(db, posts, "k1")
    assert audit.check(db).stale == []

    set_work(db, posts.id, "e1", lease_expires_at=PAST)  # the holder's lease ran out
    _write_source(db, posts, "k2")
    with db.begin() as conn:  # completing after the lease ran out is stale too
        conn.execute(sa.text("DELETE FROM _emdash_media_usage_work"))
    _write_source(db, posts, "k3")  # no work row at all: nobody holds the item
    report = audit.check(db)
    assert [row[0] for row in report.stale] == ["write", "complete", "write"]
    assert report.claims == 1 and report.writes == 3


def test_writes_under_a_live_claimed_key_range_pass(db: sa.Engine) -> None:
    posts = active_collection(db, "posts", SAMPLE_FIELDS)
    audit.install(db)

    def key_range(**values: object) -> None:
        columns = ", ".join(f"{name} = :{name}" for name in values)
        with db.begin() as conn:
            conn.execute(sa.text(f"UPDATE _media_usage_worker_backfill_ranges SET {columns}"),
                         values)  # fmt: skip

    with db.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO _media_usage_worker_backfill_ranges (range_id, collection_id, "
                "collection_slug, run_token, change_epoch, after_key, last_key) "
                "VALUES ('r1', :c, 'posts', 'run', 1, 'a', 'f')"
            ),
            {"c": posts.id},
        )
    # A claim as the repository makes it: the audit records the token it issued.
    key_range(state="leased", lease_token="t1", lease_expires_at=FUTURE)
    _write_source(db, posts, "k1")  # e1 is in ('a', 'f']
    assert audit.check(db).stale == []

    key_range(after_key="e1")  # the range moved past e1: it no longer holds it
    _write_source(db, posts, "k2")
    key_range(after_key="a", lease_expires_at=PAST)  # the holder's lease ran out
    _write_source(db, posts, "k3")
    report = audit.check(db)
    assert [row[0] for row in report.stale] == ["write", "write"]
    assert report.claims == 1 and report.writes == 3
