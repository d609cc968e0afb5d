"""The operator's first hour: the CLI as a subprocess, on both dialects.

Each test runs ``python -m media_usage_worker`` the way an operator runs ``media-usage``: exit
codes, one ``Error`` line and no traceback on bad input, and nothing created or changed by it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.repository.migration.migrate import current_revision, head_revision
from tests.processes import cli
from tests.support import active_collection, drain, mark_coverage_complete

ACCEPTED = "sqlite:///PATH or postgresql://"


@pytest.fixture
def site(db: sa.Engine, migrated_url: str) -> tuple[sa.Engine, str]:
    """A collection with three published entries using ``m1``, one with a draft using it too."""
    active_collection(db, "posts", [FieldDefinition("hero", "Hero", "image")])
    with db.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO revisions (id, collection, entry_id, data) "
                "VALUES ('r1', 'posts', 'e0', '{\"hero\": \"m1\"}')"
            )
        )
        for i in range(3):
            conn.execute(
                sa.text(
                    "INSERT INTO ec_posts (id, status, hero, draft_revision_id) "
                    "VALUES (:i, 'published', 'm1', :r)"
                ),
                {"i": f"e{i}", "r": "r1" if i == 0 else None},
            )
    return db, migrated_url


# --- database URLs (item 2) -------------------------------------------------------------------


def test_postgres_scheme_is_accepted(site, dialect: str) -> None:
    _, url = site
    if dialect == "sqlite":
        pytest.skip("the postgres:// alias is PostgreSQL's")
    alias = "postgres://" + url.split("://", 1)[1]
    assert cli("status", "--json", url=alias).code == 0


@pytest.mark.parametrize("bad", ["notaurl://", "http://x", "mysql://u@h/db", "not a url", ""])
def test_every_url_problem_is_a_usage_error_naming_the_accepted_forms(bad: str, tmp_path) -> None:
    ran = cli("status", url=bad, cwd=tmp_path)
    assert ran.code == 2, ran
    assert len(ran.errors) == 1 and (ACCEPTED in ran.errors[0] or "sqlite:///" in ran.errors[0])
    assert list(tmp_path.iterdir()) == []


# --- downgrade (item 3), missing and unmigrated databases (item 4) -----------------------------


def test_downgrade_to_an_unknown_revision_is_a_usage_error(migrated_url: str) -> None:
    ran = cli("db", "downgrade", "--revision", "bogus", url=migrated_url)
    assert ran.code == 2 and len(ran.errors) == 1 and "base" in ran.errors[0]
    assert current_revision(migrated_url) == head_revision()


def test_read_commands_never_create_a_database(tmp_path: Path) -> None:
    for args in (["status"], ["usage", "m1"], ["work", "list", "--collection", "posts"]):
        ran = cli(*args, cwd=tmp_path)  # the default URL: sqlite:///media_usage.db
        assert ran.code == 1 and "run media-usage db upgrade" in ran.errors[0], ran
    assert list(tmp_path.iterdir()) == []


def test_an_unmigrated_database_says_to_upgrade(database_url: str) -> None:
    engine = sa.create_engine(database_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE host_table (id integer)"))  # a database, not ours
    engine.dispose()
    for args in (["status"], ["collections", "list"], ["activate"]):
        ran = cli(*args, url=database_url)
        assert ran.code == 1 and ran.errors == [
            "Error: the database has no media usage schema: run media-usage db upgrade"
        ], ran
    assert current_revision(database_url) is None


# --- work list / retry (item 6) ------------------------------------------------------------------


def test_a_bad_slug_is_a_usage_error_for_every_command(site) -> None:
    _, url = site
    for args in (
        ["work", "list", "--collection", "Bad Slug!"],
        ["work", "retry", "--collection", "Bad Slug!", "--content-id", "e0"],
        ["repair", "--collection", "Bad Slug!"],
    ):
        ran = cli(*args, url=url)
        assert ran.code == 2 and len(ran.errors) == 1, (args, ran)


def test_work_retry_takes_a_slug_and_says_what_went_wrong(site) -> None:
    _, url = site
    ran = cli("work", "retry", "--collection", "posts", "--content-id", "e1", url=url)
    assert ran.code == 0 and ran.out.startswith("pending"), ran
    unknown = cli("work", "retry", "--collection", "nope", "--content-id", "e1", url=url)
    assert unknown.code == 1 and unknown.errors == ["Error: collection 'nope' not found"]
    malformed = cli("work", "retry", "--collection-id", "notanid", "--content-id", "e1", url=url)
    assert malformed.code == 2 and "--collection-id must be a collection id" in malformed.err
    nobody = "01J9Z6Q8V2M3N4P5R6S7T8V9W0"
    by_id = cli("work", "retry", "--collection-id", nobody, "--content-id", "e1", url=url)
    assert by_id.code == 1 and f"collection '{nobody}' not found" in by_id.errors[0]
    long_id = cli("work", "retry", "--collection", "posts", "--content-id", "x" * 2000, url=url)
    assert (
        long_id.code == 2
        and "--content-id must be a non-empty id of at most 1024" in (long_id.errors[0])
    )
    both = cli("work", "retry", "--collection", "posts", "--collection-id", "x", "--content-id",
               "e1", url=url)  # fmt: skip
    assert both.code == 2 and "exactly one of" in both.errors[0]


# --- status --check, --version, headers, usage (item 7) ------------------------------------------


def test_status_check_fails_until_coverage_is_complete_and_nothing_is_old(site) -> None:
    db, url = site
    ran = cli("status", "--check", url=url)
    assert ran.code == 1 and "posts: coverage" in ran.errors[0], ran
    assert ran.out.splitlines()[1].split()[:2] == ["COLLECTION", "COVERAGE"]  # the table printed
    drain(db)
    mark_coverage_complete(db)
    assert cli("status", "--check", url=url).code == 0
    with db.begin() as conn:
        conn.execute(sa.text("UPDATE ec_posts SET hero = 'm2' WHERE id = 'e1'"))
        conn.execute(
            sa.text("UPDATE _emdash_media_usage_work SET next_attempt_at = :t"),
            {"t": "2000-01-01T00:00:00.000Z"},
        )
        conn.execute(sa.text("UPDATE _emdash_media_usage_index_status SET status = 'complete'"))
    old = cli("status", "--check", "--max-age", "60", url=url)
    assert old.code == 1 and "posts: oldest due item" in old.errors[0], old
    assert cli("status", url=url).code == 0  # without --check, a report only


def test_a_failed_item_fails_the_check_and_is_listed_under_headers(site) -> None:
    db, url = site
    drain(db)
    mark_coverage_complete(db)
    with db.begin() as conn:
        conn.execute(sa.text("UPDATE ec_posts SET hero = 'm2' WHERE id = 'e1'"))
        conn.execute(
            sa.text(
                "UPDATE _emdash_media_usage_work SET state = 'failed', attempt_count = 5, "
                "last_error_code = 'MEDIA_USAGE_PROCESSING_FAILED'"
            )
        )
        conn.execute(sa.text("UPDATE _emdash_media_usage_index_status SET status = 'complete'"))
    ran = cli("status", "--check", url=url)
    assert ran.code == 1 and ran.errors == ["Error: posts: 1 failed item(s)"], ran
    lines = ran.out.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("FAILED IN")))
    assert lines[header + 1].split()[:3] == ["posts", "e1", "MEDIA_USAGE_PROCESSING_FAILED"]


def test_version_and_table_headers(site) -> None:
    _, url = site
    version = cli("--version")
    assert version.code == 0 and version.out.startswith("media-usage, version ")
    listed = cli("collections", "list", url=url)
    assert listed.out.splitlines()[0].split() == ["SLUG", "ID", "FIELDS"]
    assert listed.out.splitlines()[1].split()[0] == "posts"


def test_usage_shows_each_variant_and_each_field_once(site) -> None:
    db, url = site
    drain(db)
    ran = cli("usage", "m1", url=url)
    assert ran.code == 0, ran
    lines = ran.out.splitlines()
    assert lines[1].split()[-2:] == ["VARIANTS", "FIELDS"]
    e0 = next(line for line in lines if line.startswith("posts") and " e0 " in line)
    # e0's published row and its draft both use m1 in ``hero``: one row, the field once.
    assert e0.endswith("columns, draft_overlay  hero"), e0
    assert sum(" e0 " in line for line in lines) == 1
    as_json = json.loads(cli("usage", "m1", "--json", url=url).out)
    assert as_json["in_library"] is False and len(as_json["entries"]) == 3
