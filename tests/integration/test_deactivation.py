"""Deactivating capture, and the uninstall it opens: both dialects, library and CLI."""

from __future__ import annotations

import sqlalchemy as sa
from click.testing import CliRunner

from media_usage_worker.cli import main
from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.pipeline.capture import activate, deactivate
from media_usage_worker.repository.lifecycle import triggers
from media_usage_worker.repository.migration.migrate import current_revision, downgrade
from tests.support import active_collection, drain, get_work, mark_coverage_complete, status_row


def count(engine: sa.Engine, table: str) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()


def write(engine: sa.Engine, statement: str) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(statement))


def test_deactivation_stops_capture_and_opens_the_way_to_uninstall(db, migrated_url) -> None:
    posts = active_collection(db, "posts", [FieldDefinition("hero", "Hero", "image")])
    write(db, "INSERT INTO ec_posts (id, hero) VALUES ('e1', 'm1')")
    drain(db)
    mark_coverage_complete(db)
    write(db, "INSERT INTO ec_posts (id, hero) VALUES ('e2', 'm2')")  # queued, not processed
    assert count(db, "_emdash_media_usage_work") == 1

    assert deactivate(db) == ["posts"]
    with db.connect() as conn:
        assert triggers.owned_triggers(conn, "posts") == []
    assert count(db, "_emdash_media_usage_work") == 0
    row = status_row(db, posts.id)
    assert (row["status"], row["capture_state"], row["reconciliation_required"]) == (
        "stale", None, 1,
    )  # fmt: skip
    assert row["last_error_code"] == "CONTENT_USAGE_STALE"
    # Host writes go through uncaptured; the index keeps what it had.
    write(db, "UPDATE ec_posts SET hero = 'm3' WHERE id = 'e1'")
    assert get_work(db, posts.id, "e1") is None
    assert count(db, "_emdash_media_usage_sources") > 0

    # Uninstall: the media usage tables go, the host's content registry stays.
    downgrade(migrated_url, "0001_core_content_registry")
    assert current_revision(migrated_url) == "0001_core_content_registry"
    assert count(db, "ec_posts") == 2


def test_activating_again_captures_and_reconciles_everything(db) -> None:
    posts = active_collection(db, "posts", [FieldDefinition("hero", "Hero", "image")])
    deactivate(db)
    write(db, "INSERT INTO ec_posts (id, hero) VALUES ('e1', 'm1')")  # written while off
    activate(db)
    row = status_row(db, posts.id)
    assert (row["capture_state"], row["reconciliation_required"]) == ("active", 1)
    write(db, "INSERT INTO ec_posts (id, hero) VALUES ('e2', 'm2')")
    assert get_work(db, posts.id, "e2")["state"] == "pending"


def test_the_command_asks_first_and_changes_nothing_when_declined(db, migrated_url) -> None:
    active_collection(db, "posts")
    write(db, "INSERT INTO ec_posts (id) VALUES ('e1')")
    declined = CliRunner().invoke(main, ["deactivate", "--database-url", migrated_url], input="n\n")
    assert declined.exit_code == 1 and count(db, "_emdash_media_usage_work") == 1
    done = CliRunner().invoke(main, ["deactivate", "--yes", "--database-url", migrated_url])
    assert done.exit_code == 0 and "capture off on 1 collection(s): posts" in done.output
    assert count(db, "_emdash_media_usage_work") == 0
