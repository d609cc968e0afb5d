"""Capture triggers and activation, with content written by plain SQL as a host app would."""

from __future__ import annotations

import re
import threading

import pytest
import sqlalchemy as sa

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.pipeline.capture import activate
from media_usage_worker.repository.lifecycle import triggers
from media_usage_worker.repository.registry.collections import CollectionRegistry
from media_usage_worker.repository.work_queue.work import MediaUsageWorkRepository
from tests.support import FUTURE, active_collection, get_work, status_row

INACTIVE = "media usage capture inactive"
FIELDS = [FieldDefinition("title", "Title", "string"), FieldDefinition("hero", "Hero", "image")]


def write(engine: sa.Engine, statement: str, **params) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(statement), params)


def count(engine: sa.Engine, table: str) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()


def test_trigger_names_follow_the_sha256_rule() -> None:
    names = triggers.trigger_names("01J0000000000000000000000A", "posts")
    assert sorted(names) == ["ad", "ai", "au"]
    for suffix, name in names.items():
        assert re.fullmatch(r"emdash_mu_[0-9a-f]{32}_(ai|au|ad)", name) and name.endswith(suffix)
        assert len(name) == 45
    # Known vector: sha256("1:01J0000000000000000000000A:posts")[:16].
    assert names["ai"] == "emdash_mu_8ea657f85b6370df74694bdfc72f6cb0_ai"


def test_activation_installs_triggers_on_every_collection(db: sa.Engine) -> None:
    registry = CollectionRegistry(db)
    before = [registry.create_collection(slug, slug.title(), FIELDS) for slug in ("pages", "posts")]
    write(db, "INSERT INTO ec_posts (id, title) VALUES ('old', 'written before activation')")
    assert count(db, "_emdash_media_usage_work") == 0  # nothing captured yet

    assert activate(db) == ["pages", "posts"]
    for collection in before:
        expected = sorted(triggers.trigger_names(collection.id, collection.slug).values())
        with db.begin() as conn:
            assert triggers.owned_triggers(conn, collection.slug) == expected
        status = status_row(db, collection.id)
        assert (status["capture_state"], status["reconciliation_required"]) == ("active", 1)
    with db.connect() as conn:
        state = conn.execute(
            sa.text("SELECT state, activated_at FROM _emdash_media_usage_activation")
        ).one()
    assert state[0] == "active" and state[1]


def test_activation_again_is_harmless_and_replaces_foreign_triggers(db: sa.Engine) -> None:
    posts = active_collection(db, "posts", FIELDS)
    write(db, "INSERT INTO ec_posts (id) VALUES ('e1')")
    foreign = "emdash_mu_00000000000000000000000000000000_ai"
    if db.dialect.name == "postgresql":
        write(
            db,
            f"CREATE TRIGGER {foreign} AFTER INSERT ON ec_posts FOR EACH ROW "
            "EXECUTE FUNCTION emdash_media_usage_capture_work('x', 'posts')",
        )
    else:
        write(db, f"CREATE TRIGGER {foreign} AFTER INSERT ON ec_posts BEGIN SELECT 1; END")
    status_before = status_row(db, posts.id)
    work_before = get_work(db, posts.id, "e1")

    activate(db)
    with db.begin() as conn:
        assert triggers.owned_triggers(conn, "posts") == sorted(
            triggers.trigger_names(posts.id, "posts").values()
        )
    assert status_row(db, posts.id) == status_before
    assert get_work(db, posts.id, "e1") == work_before
    write(db, "INSERT INTO ec_posts (id) VALUES ('e2')")
    assert get_work(db, posts.id, "e2")["change_epoch"] == 2


def test_a_trigger_name_from_the_catalog_is_never_run_as_sql(db: sa.Engine) -> None:
    """A host-made trigger whose name is SQL: activation drops it by its quoted name."""
    active_collection(db, "posts", FIELDS)
    hostile = "emdash_mu_x ON ec_posts; CREATE TABLE pwned (id int); --"
    if db.dialect.name == "postgresql":
        write(
            db,
            f'CREATE TRIGGER "{hostile}" AFTER INSERT ON ec_posts FOR EACH ROW '
            "EXECUTE FUNCTION emdash_media_usage_capture_work('x', 'posts')",
        )
    else:
        write(db, f'CREATE TRIGGER "{hostile}" AFTER INSERT ON ec_posts BEGIN SELECT 1; END')

    activate(db)
    with db.begin() as conn:
        assert hostile not in triggers.owned_triggers(conn, "posts")
        assert not sa.inspect(conn).has_table("pwned")


def test_insert_update_delete_coalesce_and_fence_a_live_lease(db: sa.Engine) -> None:
    posts = active_collection(db, "posts", FIELDS)
    repo = MediaUsageWorkRepository(db)
    write(db, "INSERT INTO ec_posts (id, title) VALUES ('e1', 'a')")
    holder = repo.claim_work(
        collection_id=posts.id, content_id="e1", work_version=1, lease_duration_seconds=600
    )
    assert holder is not None and holder.lease_expires_at > "2000"
    write(db, "UPDATE ec_posts SET title = 'b' WHERE id = 'e1'")
    write(db, "DELETE FROM ec_posts WHERE id = 'e1'")

    row = get_work(db, posts.id, "e1")
    assert (row["state"], row["change_epoch"], row["work_version"]) == ("pending", 3, 3)
    assert row["lease_token"] is None and row["attempt_count"] == 0
    assert count(db, "_emdash_media_usage_work") == 1
    assert status_row(db, posts.id)["change_epoch"] == 3
    lease = {
        "collection_id": posts.id,
        "content_id": "e1",
        "work_version": 1,
        "lease_token": holder.lease_token,
    }
    assert repo.complete_work(**lease) is False
    assert repo.fail_work(**lease, error_code="E") is False
    assert get_work(db, posts.id, "e1") == row


def test_capture_turns_complete_into_stale(db: sa.Engine) -> None:
    posts = active_collection(db, "posts", FIELDS)
    write(db, "UPDATE _emdash_media_usage_index_status SET status = 'complete', completed_at = 'c'")
    write(db, "INSERT INTO ec_posts (id) VALUES ('e1')")
    status = status_row(db, posts.id)
    assert (status["status"], status["completed_at"]) == ("stale", None)


def test_capture_resets_a_failed_row(db: sa.Engine) -> None:
    posts = active_collection(db, "posts", FIELDS)
    write(db, "INSERT INTO ec_posts (id) VALUES ('e1')")
    write(
        db,
        "UPDATE _emdash_media_usage_work SET state = 'failed', attempt_count = 5, "
        "last_error_code = 'E', lease_expires_at = :f",
        f=FUTURE,
    )
    write(db, "UPDATE ec_posts SET title = 'again' WHERE id = 'e1'")
    row = get_work(db, posts.id, "e1")
    assert (row["state"], row["attempt_count"], row["last_error_code"]) == ("pending", 0, None)
    assert row["work_version"] == 2 and row["lease_expires_at"] is None


STATUS = "UPDATE _emdash_media_usage_index_status SET "
POSTS_ROW = " WHERE scope_key = 'posts'"
BREAKS = {
    "capture installing": STATUS + "capture_state = 'installing'" + POSTS_ROW,
    "capture deleting": STATUS + "capture_state = 'deleting'" + POSTS_ROW,
    "status row gone": "DELETE FROM _emdash_media_usage_index_status" + POSTS_ROW,
    "collection renamed": "UPDATE _emdash_collections SET slug = 'articles'",
    "collection id changed": STATUS + "collection_id = 'OTHER'" + POSTS_ROW,
}


@pytest.mark.parametrize("why", sorted(BREAKS))
def test_writes_fail_closed_when_capture_is_not_active(db: sa.Engine, why: str) -> None:
    posts = active_collection(db, "posts", FIELDS)
    write(db, "INSERT INTO ec_posts (id) VALUES ('e1')")
    write(db, BREAKS[why])
    work_before = get_work(db, posts.id, "e1")
    for statement in (
        "INSERT INTO ec_posts (id) VALUES ('e2')",
        "UPDATE ec_posts SET title = 'x' WHERE id = 'e1'",
        "DELETE FROM ec_posts WHERE id = 'e1'",
    ):
        with pytest.raises(sa.exc.DBAPIError, match=INACTIVE):
            write(db, statement)
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT id, title FROM ec_posts")).all() == [("e1", None)]
    assert get_work(db, posts.id, "e1") == work_before
    assert count(db, "_emdash_media_usage_work") == 1


def test_a_failing_multi_row_insert_leaves_nothing(db: sa.Engine) -> None:
    posts = active_collection(db, "posts", FIELDS)
    epoch = status_row(db, posts.id)["change_epoch"]
    with pytest.raises(sa.exc.IntegrityError):
        write(
            db,
            "INSERT INTO ec_posts (id, slug) VALUES ('a', 'same'), ('b', 'other'), ('c', 'same')",
        )
    assert count(db, "ec_posts") == 0
    assert count(db, "_emdash_media_usage_work") == 0
    assert status_row(db, posts.id)["change_epoch"] == epoch


def test_new_collection_while_active_is_captured_from_its_first_write(db: sa.Engine) -> None:
    active_collection(db, "posts", FIELDS)
    pages = CollectionRegistry(db).create_collection("pages", "Pages", FIELDS)
    status = status_row(db, pages.id)
    assert (status["capture_state"], status["status"], status["reconciliation_required"]) == (
        "active",
        "never",
        1,
    )
    write(db, "INSERT INTO ec_pages (id) VALUES ('p1')")
    assert get_work(db, pages.id, "p1")["change_epoch"] == 1


def test_failed_collection_creation_while_active_leaves_no_triggers_or_rows(db: sa.Engine) -> None:
    active_collection(db, "posts", FIELDS)
    registry = CollectionRegistry(db)
    with pytest.raises(ValueError):
        registry.create_collection("pages", "Pages", [FieldDefinition("id", "Id", "string")])
    assert not sa.inspect(db).has_table("ec_pages")
    assert registry.get("pages") is None
    with db.connect() as conn:
        scopes = conn.execute(
            sa.text("SELECT scope_key FROM _emdash_media_usage_index_status "
                    "WHERE collection_id NOT LIKE 'source-%'")
        ).scalars().all()  # fmt: skip
    assert scopes == ["posts"]


def test_concurrent_writers_lose_no_epoch(db: sa.Engine) -> None:
    """1,000 single-row inserts from 4 connections at once: every epoch bump lands."""
    posts = active_collection(db, "posts", FIELDS)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            barrier.wait(timeout=10)
            for i in range(250):
                write(db, "INSERT INTO ec_posts (id) VALUES (:id)", id=f"w{n}-{i}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert count(db, "_emdash_media_usage_work") == 1000
    assert status_row(db, posts.id)["change_epoch"] == 1000
    with db.connect() as conn:
        epochs = conn.execute(
            sa.text("SELECT change_epoch FROM _emdash_media_usage_work")
        ).scalars()
        assert sorted(epochs) == list(range(1, 1001))


def test_remove_drops_every_capture_trigger_of_the_table(db: sa.Engine) -> None:
    posts = active_collection(db, "posts", FIELDS)
    with db.begin() as conn:
        triggers.remove(conn, "posts")
        assert triggers.owned_triggers(conn, "posts") == []
    write(db, "INSERT INTO ec_posts (id) VALUES ('after')")  # no longer captured
    assert get_work(db, posts.id, "after") is None
    with pytest.raises(ValueError), db.begin() as conn:
        triggers.remove(conn, "x; drop table ec_posts")
