"""Schema changes the CMS makes itself, by plain SQL on its registry and content tables (as
emdash's schema registry does, without this project's API), are followed: coverage is never
``complete`` over one not yet indexed, and the reconcile tick indexes it."""

from __future__ import annotations

import sqlalchemy as sa

from media_usage_worker.api import MediaUsage
from media_usage_worker.pipeline.reconciliation import Reconciler
from media_usage_worker.repository.base.ids import new_ulid
from media_usage_worker.repository.registry.content_tables import create_content_table
from tests.integration.test_cleanup import cleanup_site, rows, sql
from tests.integration.test_sources import settle


def unused_ids(engine: sa.Engine) -> list[str] | None:
    page = MediaUsage(engine).unused(limit=100)
    return [item.id for item in page.items] if page.known else None


def posts_id(engine: sa.Engine) -> str:
    return rows(engine, "SELECT id FROM _emdash_collections WHERE slug = 'posts'")[0][0]


def add_field(engine: sa.Engine, collection_id: str, table: str, slug: str) -> None:
    """A field as the CMS adds one: its registry row and its column, in one transaction."""
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO _emdash_fields (id, collection_id, slug, label, type, "
                    "column_type, sort_order) VALUES (:i, :c, :s, :s, 'image', 'TEXT', 5)"),
            {"i": new_ulid(), "c": collection_id, "s": slug},
        )  # fmt: skip
        conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN {slug} TEXT"))


def test_a_field_the_cms_adds_is_indexed_and_one_it_deletes_stops_counting(db) -> None:
    site = cleanup_site(db)  # posts p1 uses m4, trashed p2 uses m5; m1..m3 used nowhere
    assert unused_ids(site) == ["m1", "m2", "m3"]
    add_field(site, posts_id(site), "ec_posts", "thumb")
    sql(site, "UPDATE ec_posts SET thumb = 'm1' WHERE id = 'p1'")
    # The write queued p1, but with the old fields: not known until the field is indexed.
    assert unused_ids(site) is None
    assert MediaUsage(site).retire(["m1"]).refused == {"m1": "not_known_yet"}
    settle(site)
    assert unused_ids(site) == ["m2", "m3"]

    with site.begin() as conn:  # the CMS deletes the field: registry row and column
        conn.execute(sa.text("DELETE FROM _emdash_fields WHERE slug = 'thumb'"))
        conn.execute(sa.text("ALTER TABLE ec_posts DROP COLUMN thumb"))
    assert unused_ids(site) is None  # read as stale at once, before any tick
    reports = Reconciler(site, defer_seconds=0).tick()
    assert ("posts", "rules_changed") in {(r.collection_slug, r.action) for r in reports}
    settle(site)
    assert unused_ids(site) == ["m1", "m2", "m3"]


def test_a_collection_the_cms_creates_is_captured_and_reconciled(db) -> None:
    site = cleanup_site(db)
    news = new_ulid()
    with site.begin() as conn:  # as the CMS creates one: registry, field, content table
        conn.execute(
            sa.text("INSERT INTO _emdash_collections (id, slug, label) VALUES (:i, 'news', 'N')"),
            {"i": news},
        )
        create_content_table(conn, "news", [])
        conn.execute(sa.text("INSERT INTO ec_news (id, slug) VALUES ('n1', 'n1')"))
    add_field(site, news, "ec_news", "cover")
    sql(site, "UPDATE ec_news SET cover = 'm2' WHERE id = 'n1'")
    assert unused_ids(site) is None  # a collection nobody indexed yet
    reports = Reconciler(site, defer_seconds=0).tick()
    assert ("news", "captured") in {(r.collection_slug, r.action) for r in reports}
    settle(site)
    assert unused_ids(site) == ["m1", "m3"]
    sql(site, "INSERT INTO ec_news (id, slug, cover) VALUES ('n2', 'n2', 'm3')")  # captured
    assert rows(site, "SELECT content_id FROM _emdash_media_usage_work") == [("n2",)]
    settle(site)
    assert unused_ids(site) == ["m1"]


def test_a_collection_the_cms_deletes_with_a_write_queued_leaves_the_answer_known(db) -> None:
    site = cleanup_site(db)
    news = new_ulid()
    with site.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO _emdash_collections (id, slug, label) VALUES (:i, 'news', 'N')"),
            {"i": news},
        )
        create_content_table(conn, "news", [])
    settle(site)
    sql(site, "INSERT INTO ec_news (id, slug) VALUES ('n1', 'n1')")  # queued
    with site.begin() as conn:  # the CMS deletes the collection: registry rows and table
        conn.execute(sa.text("DELETE FROM _emdash_collections WHERE id = :i"), {"i": news})
        conn.execute(sa.text("DROP TABLE ec_news"))
    assert rows(site, "SELECT content_id FROM _emdash_media_usage_work") == [("n1",)]
    assert unused_ids(site) == ["m1", "m2", "m3"]
    assert MediaUsage(site).retire(["m1"]).retired == ["m1"]


def test_a_built_in_source_whose_table_lost_its_shape_is_reported_not_skipped(db) -> None:
    site = cleanup_site(db)  # m1..m3 used nowhere
    assert unused_ids(site) == ["m1", "m2", "m3"]
    with site.begin() as conn:  # the host's users table as another CMS keeps it: no avatar
        conn.execute(sa.text("DROP TABLE users"))
        conn.execute(sa.text("CREATE TABLE users (id TEXT PRIMARY KEY, email TEXT NOT NULL)"))
        conn.execute(sa.text("INSERT INTO users (id, email) VALUES ('u1', 'a@example.org')"))
    assert unused_ids(site) is None  # where its avatars are is not known
    assert MediaUsage(site).retire(["m1"]).refused == {"m1": "not_known_yet"}
    overview = MediaUsage(site).status()
    (user,) = [s for s in overview.sources if s.kind == "user"]
    assert (user.coverage, overview.coverage) == ("stale", "stale")
    assert user.reason is not None and "avatar_url or avatar_id" in user.reason
    Reconciler(site, defer_seconds=0).tick()  # nothing the tick can do: it stays reported
    assert unused_ids(site) is None

    # The host adds emdash's avatar column: the tick reads the source over it and re-indexes.
    sql(site, "ALTER TABLE users ADD COLUMN avatar_url TEXT")
    sql(site, "UPDATE users SET avatar_url = '/_emdash/api/media/file/' || "
              "(SELECT storage_key FROM media WHERE id = 'm1')")  # fmt: skip
    assert unused_ids(site) is None
    reports = Reconciler(site, defer_seconds=0).tick()
    assert ("user", "captured") in {(r.collection_slug, r.action) for r in reports}
    settle(site)
    assert [s.reason for s in MediaUsage(site).status().sources] == [None, None, None]
    assert unused_ids(site) == ["m2", "m3"]
    sql(site, "UPDATE users SET avatar_url = NULL")  # captured over the new column
    settle(site)
    assert unused_ids(site) == ["m1", "m2", "m3"]


def test_a_built_in_table_that_is_gone_is_named_by_readiness_and_status(db) -> None:
    site = cleanup_site(db)
    sql(site, "DROP TABLE _emdash_bylines")
    overview = MediaUsage(site).status()
    (byline,) = [s for s in overview.sources if s.kind == "byline"]
    assert byline.reason == "table _emdash_bylines is not in the database"
    assert unused_ids(site) is None
