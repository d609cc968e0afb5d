"""Coverage under extraction rules: an index computed under other rules is never ``complete``,
is marked ``stale`` and re-indexed with no operator step (both dialects)."""

from __future__ import annotations

import json

import sqlalchemy as sa
from click.testing import CliRunner

from media_usage_worker.cli import main
from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.rules import EXTRACTION_VERSION
from media_usage_worker.repository.index.usage import usage_count, usage_page
from media_usage_worker.repository.reconciling.coverage import restore_settled_coverage
from media_usage_worker.repository.reconciling.status import overview
from media_usage_worker.repository.registry.rules import mark_rules_changed
from tests.index_oracle import actual_index, expected_index
from tests.support import (
    active_collection,
    drain,
    mark_coverage_complete,
    reconcile_until_complete,
    status_row,
)

FIELDS = [FieldDefinition("hero", "Hero", "image"), FieldDefinition("body", "Body", "portableText")]
GALLERY = [{"_type": "gallery", "images": [{"asset": {"_ref": "g1"}}, {"asset": {"_ref": "g2"}}]}]


def sql(engine: sa.Engine, statement: str, **params: object) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(statement), params)


def indexed_by_older_rules(engine: sa.Engine) -> None:
    """What version 1 left: gallery images unseen, recorded under extraction 1 (or nothing)."""
    sql(
        engine,
        "DELETE FROM _emdash_media_usage WHERE field_path LIKE 'body[%].images[%'",
    )
    # Its projection fingerprint was computed without them too.
    sql(engine, "UPDATE _emdash_media_usage_sources SET source_fingerprint = 'v1'")
    sql(
        engine,
        "UPDATE _media_usage_worker_rules_state SET indexed_extraction_version = 1 "
        "WHERE collection_id NOT LIKE 'source-%'",
    )  # the collections only


def test_an_index_of_older_rules_is_stale_then_reindexed(db, migrated_url) -> None:
    posts = active_collection(db, "posts", FIELDS)
    sql(db, "INSERT INTO ec_posts (id, status, hero, body) VALUES ('e1', 'published', 'm1', :b)",
        b=json.dumps(GALLERY))  # fmt: skip
    sql(db, "INSERT INTO ec_posts (id, status, hero) VALUES ('e2', 'published', 'm2')")
    drain(db)
    mark_coverage_complete(db)
    assert usage_count(db, "g1")[1] == 1
    indexed_by_older_rules(db)

    # Read under the running rules, "complete" from older ones is not trusted: no count.
    coverage, count = usage_count(db, "g1")
    assert (coverage.status, count) == ("stale", None)
    assert coverage.scopes[0].rules == "extraction-1.rules-0"
    (detail,) = [d for d in overview(db)[2] if d.kind == "content"]
    running = f"extraction-{EXTRACTION_VERSION}.rules-0"
    assert detail.coverage == "stale" and detail.rules["running"] == running
    shown = CliRunner().invoke(main, ["status", "--check", "--database-url", migrated_url])
    assert shown.exit_code == 1
    assert "posts: coverage stale (extraction rules changed)" in shown.output

    # The reconcile tick marks it (one guarded statement) and re-indexes it.
    actions = reconcile_until_complete(db, posts.id)
    assert actions[0] == "rules_changed"
    status = status_row(db, posts.id)
    assert (status["status"], status["reconciliation_required"]) == ("complete", 0)
    assert actual_index(db) == expected_index(db)
    coverage, count = usage_count(db, "g1")
    assert (coverage.status, count) == ("complete", 1)
    assert coverage.scopes[0].rules == f"extraction-{EXTRACTION_VERSION}.rules-0"
    assert [e.content_id for e in usage_page(db, "g2").entries] == ["e1"]
    assert mark_rules_changed(db) == []  # nothing left to mark


def test_marking_says_why_and_a_database_without_records_is_reindexed(db) -> None:
    posts = active_collection(db, "posts", FIELDS)
    sql(db, "INSERT INTO ec_posts (id, hero) VALUES ('e1', 'm1')")
    drain(db)
    sql(db, "UPDATE _emdash_media_usage_index_status SET status = 'complete', "
            "reconciliation_required = 0")  # fmt: skip
    # As a database migrated from a version before the rules were recorded: no record at all.
    assert mark_rules_changed(db) == ["posts"]
    status = status_row(db, posts.id)
    assert (status["status"], status["last_error_code"], status["reconciliation_required"]) == (
        "stale", "MEDIA_USAGE_RULES_CHANGED", 1,
    )  # fmt: skip
    assert mark_rules_changed(db) == []  # already marked: the run will re-index it


def test_a_worker_of_other_rules_never_restores_complete(db) -> None:
    posts = active_collection(db, "posts", FIELDS)
    sql(db, "INSERT INTO ec_posts (id, hero) VALUES ('e1', 'm1')")
    drain(db)
    mark_coverage_complete(db)
    # A write made it stale; its work is done, but the index was recorded under other rules.
    sql(db, "UPDATE _emdash_media_usage_index_status SET status = 'stale' "
            "WHERE collection_id = :id", id=posts.id)  # fmt: skip
    sql(db, "UPDATE _media_usage_worker_rules_state SET indexed_extraction_version = :v "
            "WHERE collection_id = :id", v=EXTRACTION_VERSION + 1, id=posts.id)  # fmt: skip
    assert restore_settled_coverage(db) == []
    assert status_row(db, posts.id)["status"] == "stale"
    sql(db, "UPDATE _media_usage_worker_rules_state SET indexed_extraction_version = :v "
            "WHERE collection_id = :id", v=EXTRACTION_VERSION, id=posts.id)  # fmt: skip
    assert restore_settled_coverage(db) == ["posts"]
    assert status_row(db, posts.id)["status"] == "complete"
