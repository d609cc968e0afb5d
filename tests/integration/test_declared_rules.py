"""Declared extraction rules: reference paths and media URLs are indexed, a change
takes coverage out of ``complete`` in its own transaction and the reconciliation brings it back
under the new rules (both dialects)."""

from __future__ import annotations

import json

import sqlalchemy as sa
from click.testing import CliRunner

from media_usage_worker.cli import main
from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.reference_paths import parse_reference_path
from media_usage_worker.domain.rules import EXTRACTION_VERSION
from media_usage_worker.pipeline.reconciliation import Reconciler
from media_usage_worker.pipeline.registry import (
    add_media_url_prefix,
    declare_reference_path,
    remove_reference_path,
)
from media_usage_worker.repository.base.schema import media, rules_state
from media_usage_worker.repository.index.usage import usage_count
from media_usage_worker.repository.registry.rules import read_declared_rules
from tests.index_oracle import actual_index, expected_index
from tests.support import (
    active_collection,
    drain,
    mark_coverage_complete,
    reconcile_until_complete,
    status_row,
)

FIELDS = [
    FieldDefinition("hero", "Hero", "image"),
    FieldDefinition("body", "Body", "portableText"),
    FieldDefinition("settings", "Settings", "json"),
]
MARKETING = "body[_type=marketing.gallery].items[].imageUrl"
FAVICON = "settings.favicon.mediaId"
FILE_URL = "/_emdash/api/media/file/"
BODY = [
    {"_type": "block", "children": []},
    {"_type": "marketing.gallery", "items": [
        {"imageUrl": FILE_URL + "photo.jpg"},  # a library file: m-photo
        {"imageUrl": FILE_URL + "missing.jpg"},  # matches no media item: no reference
        {"imageUrl": "https://images.example.org/x.jpg"},  # external: no reference
        {"imageUrl": "m-plain"},
    ]},
]  # fmt: skip


def sql(engine: sa.Engine, statement: str, **params: object) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(statement), params)


def library(engine: sa.Engine, *items: tuple[str, str]) -> None:
    rows = [
        {"id": i, "filename": key, "mime_type": "image/jpeg", "storage_key": key}
        for i, key in items
    ]
    with engine.begin() as conn:
        conn.execute(media.insert(), rows)


def count(engine: sa.Engine, media_id: str) -> tuple[str, int | None]:
    coverage, found = usage_count(engine, media_id)
    return coverage.status, found


def indexed_site(engine: sa.Engine):
    """A complete collection whose entry holds media only declared rules can find."""
    pages = active_collection(engine, "pages", FIELDS)
    library(engine, ("m-photo", "photo.jpg"), ("m-other", "other.jpg"))
    sql(engine, "INSERT INTO ec_pages (id, status, hero, body, settings) "
                "VALUES ('e1', 'published', 'm-hero', :body, :settings)",
        body=json.dumps(BODY), settings=json.dumps({"favicon": {"mediaId": "m-icon"}}))  # fmt: skip
    drain(engine)
    mark_coverage_complete(engine)
    return pages


def declare(engine: sa.Engine, path: str) -> bool:
    return declare_reference_path(engine, "pages", parse_reference_path(path))


def test_a_declared_path_takes_coverage_out_of_complete_until_reindexed(db) -> None:
    pages = indexed_site(db)
    assert count(db, "m-plain") == ("complete", 0)  # the gap the rule closes: a bare id
    assert count(db, "m-photo") == ("complete", 1)  # a file's URL in any text is a use already
    before = status_row(db, pages.id)

    assert declare(db, MARKETING) and declare(db, FAVICON)
    assert not declare(db, MARKETING)  # already declared: nothing changes
    status = status_row(db, pages.id)
    assert (status["status"], status["last_error_code"], status["reconciliation_required"]) == (
        "stale", "MEDIA_USAGE_RULES_CHANGED", 1,
    )  # fmt: skip
    assert status["change_epoch"] == before["change_epoch"] + 2
    assert count(db, "m-photo") == ("stale", None)

    reconcile_until_complete(db, pages.id)
    assert count(db, "m-photo") == ("complete", 1)
    assert count(db, "m-plain") == ("complete", 1)
    assert count(db, "m-icon") == ("complete", 1)
    assert count(db, "missing.jpg") == ("complete", 0)
    coverage, _ = usage_count(db, "m-photo")
    assert coverage.scopes[0].rules == f"extraction-{EXTRACTION_VERSION}.rules-2"
    assert actual_index(db) == expected_index(db)
    paths = {row[1] for row in actual_index(db)}
    assert {"body[1].items[0].imageUrl", "body[1].items[3].imageUrl", FAVICON} <= paths

    remove_reference_path(db, "pages", FAVICON)
    assert status_row(db, pages.id)["status"] == "stale"
    reconcile_until_complete(db, pages.id)
    assert count(db, "m-icon") == ("complete", 0)
    assert count(db, "m-photo") == ("complete", 1)


def test_a_rule_change_during_a_running_reconciliation_restarts_it(db) -> None:
    pages = indexed_site(db)
    for n in range(2, 400):  # more than a page, so the run is still running after one step
        sql(db, "INSERT INTO ec_pages (id, settings) VALUES (:id, :s)",
            id=f"e{n:03d}", s=json.dumps({"favicon": {"mediaId": "m-icon"}}))  # fmt: skip
    drain(db)
    mark_coverage_complete(db)
    declare(db, MARKETING)
    reconciler = Reconciler(db, defer_seconds=0)
    first = [report.action for report in reconciler.tick(max_steps=2)]
    assert first[0] == "started"
    assert status_row(db, pages.id)["status"] == "running"

    declare(db, FAVICON)  # mid-run: the run's pages so far were read under the old rules
    actions = reconcile_until_complete(db, pages.id)
    assert "restarted" in actions
    assert count(db, "m-icon") == ("complete", 399)
    assert actual_index(db) == expected_index(db)
    with db.connect() as conn:
        state = conn.execute(
            sa.select(rules_state).where(rules_state.c.collection_id == pages.id)
        ).one()
    assert state.indexed_rules_revision == state.rules_revision == 2


def test_media_urls_resolve_under_declared_prefixes(db) -> None:
    posts = active_collection(db, "posts", [FieldDefinition("hero", "Hero", "image")])
    library(db, ("m-photo", "photo.jpg"), ("m-poster", "poster a.png"))
    heroes = {
        "e1": FILE_URL + "photo.jpg?w=640",  # emdash's own path: always resolved
        "e2": "https://cdn.example.com/media/poster%20a.png",  # under the prefix, once declared
        "e3": "https://cdn.example.com/media/missing.jpg",  # no such media item
        "e4": "https://images.example.org/photo.jpg",  # an external URL
    }
    for content_id, hero in heroes.items():
        sql(db, "INSERT INTO ec_posts (id, hero) VALUES (:id, :hero)", id=content_id, hero=hero)
    drain(db)
    mark_coverage_complete(db)
    assert (count(db, "m-photo"), count(db, "m-poster")) == (("complete", 1), ("complete", 0))

    assert add_media_url_prefix(db, "https://cdn.example.com/media/")
    assert status_row(db, posts.id)["status"] == "stale"
    reconcile_until_complete(db, posts.id)
    assert (count(db, "m-photo"), count(db, "m-poster")) == (("complete", 1), ("complete", 1))
    indexed = {(row[0].split(":")[2], row[3]) for row in actual_index(db)}
    assert indexed == {("e1", "m-photo"), ("e2", "m-poster")}
    assert actual_index(db) == expected_index(db)


def test_an_invalid_rule_through_the_cli_changes_nothing(db, migrated_url) -> None:
    pages = indexed_site(db)
    before = status_row(db, pages.id)
    runner = CliRunner()
    refused = [
        (["rules", "add", "pages", "body[_type=x"], 2, "cannot read '[_type=x'"),
        (["rules", "add", "pages", "nofield.x"], 2, "has no field 'nofield'"),
        (["rules", "add", "Pages", "body"], 2, "Collection slug 'Pages'"),
        (["rules", "add", "nothere", "body"], 1, "No collection has slug 'nothere'"),
        (["rules", "add-url-prefix", "cdn.example.com"], 2, "media URL prefix is"),
        (["rules", "remove", "pages", "body"], 1, "declares no reference path 'body'"),
    ]
    for args, code, says in refused:
        result = runner.invoke(main, [*args, "--database-url", migrated_url])
        assert result.exit_code == code, (args, result.output)
        assert result.stderr.count("\n") == 1 and says in result.stderr, (args, result.stderr)
    assert read_declared_rules(db).reference_paths == []
    assert read_declared_rules(db).media_url_prefixes == []
    assert status_row(db, pages.id) == before

    added = runner.invoke(
        main, ["rules", "add", "pages", MARKETING, "--database-url", migrated_url]
    )
    assert added.exit_code == 0, added.output
    assert read_declared_rules(db).reference_paths == [("pages", MARKETING)]
    assert status_row(db, pages.id)["status"] == "stale"
    listed = runner.invoke(main, ["rules", "list", "--json", "--database-url", migrated_url])
    assert json.loads(listed.output)["reference_paths"] == [
        {"collection": "pages", "path": MARKETING}
    ]


def test_a_collection_declares_at_most_the_cap_of_paths(db, migrated_url) -> None:
    from media_usage_worker.domain.reference_paths import MAX_PATHS_PER_COLLECTION
    from tests.processes import cli

    active_collection(db, "posts", FIELDS)
    for i in range(MAX_PATHS_PER_COLLECTION):
        assert declare_reference_path(db, "posts", parse_reference_path(f"body.k{i}"))
    # Declaring one already there still answers "already declared", not the cap.
    assert not declare_reference_path(db, "posts", parse_reference_path("body.k0"))
    ran = cli("rules", "add", "posts", "body.one_too_many", url=migrated_url)
    assert ran.code == 2 and len(ran.errors) == 1
    assert f"the most one collection may have ({MAX_PATHS_PER_COLLECTION})" in ran.errors[0]
    listed = json.loads(cli("rules", "list", "--json", url=migrated_url).out)
    assert len(listed["reference_paths"]) == MAX_PATHS_PER_COLLECTION
