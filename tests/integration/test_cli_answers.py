"""The CLI's answers, as an operator reads them: a subprocess per command, on both dialects.
Each says the right thing in words that fit, and refuses what it cannot honour."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from media_usage_worker.api import MediaUsage
from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.errors import DatabaseNotReady
from media_usage_worker.repository.registry.collections import CollectionRegistry
from tests.processes import cli
from tests.support import active_collection, drain, get_work, mark_coverage_complete, status_row

HERO = [FieldDefinition("hero", "Hero", "image")]


@pytest.fixture
def site(db: sa.Engine, migrated_url: str) -> tuple[sa.Engine, str]:
    """posts: e0, e1, e2 use m1, e3 uses m2; indexed."""
    active_collection(db, "posts", HERO)
    with db.begin() as conn:
        for i, hero in enumerate(["m1", "m1", "m1", "m2"]):
            conn.execute(
                sa.text("INSERT INTO ec_posts (id, hero) VALUES (:i, :h)"),
                {"i": f"e{i}", "h": hero},
            )
    drain(db)
    return db, migrated_url


def test_a_usage_cursor_of_another_media_id_is_refused(site) -> None:
    _, url = site
    first = json.loads(cli("usage", "m1", "--limit", "1", "--json", url=url).out)
    assert first["next_cursor"]
    again = cli("usage", "m1", "--limit", "1", "--cursor", first["next_cursor"], url=url)
    assert again.code == 0
    other = cli("usage", "m2", "--cursor", first["next_cursor"], url=url)
    assert other.code == 2 and other.errors and "cursor" in other.errors[0], other.err
    assert other.out == ""


def test_usage_counts_are_said_in_words_that_fit(site) -> None:
    db, url = site
    unknown = cli("usage", "m2", url=url).out.splitlines()[0]
    assert "live uses unknown until coverage is complete" in unknown, unknown
    mark_coverage_complete(db)
    assert "used by 1 live entry;" in cli("usage", "m2", url=url).out
    assert "used by 3 live entries;" in cli("usage", "m1", url=url).out
    assert "used by 0 live entries;" in cli("usage", "m-free", url=url).out


def test_repair_of_an_unknown_collection_says_only_that(site) -> None:
    _, url = site
    ran = cli("repair", "--collection", "nosuch", url=url)
    assert ran.code == 1
    assert "repairing" not in ran.err + ran.out
    assert ran.errors == ["Error: collection 'nosuch' not found"]


def test_max_age_without_check_is_refused(site) -> None:
    _, url = site
    ran = cli("status", "--max-age", "10", url=url)
    assert ran.code == 2 and "--max-age only applies with --check" in ran.err
    assert cli("status", "--check", "--max-age", "100000", url=url).code in (0, 1)


def test_status_check_before_activation_fails_with_the_hint(db: sa.Engine, migrated_url) -> None:
    CollectionRegistry(db).create_collection("posts", "Posts", HERO)
    ran = cli("status", "--check", url=migrated_url)
    assert ran.code == 1
    assert "capture is not active" in ran.err and "media-usage activate" in ran.err


def test_a_second_forced_delete_says_it_was_already_deleted(site) -> None:
    _, url = site
    first = cli("collections", "delete", "posts", "--force", url=url)
    assert first.code == 0 and "deleted collection posts" in first.out
    second = cli("collections", "delete", "posts", "--force", url=url)
    assert second.code == 1 and second.out == ""
    assert "already deleted" in second.errors[0], second.err


def test_a_retry_of_an_entry_nobody_wrote_changes_nothing(site) -> None:
    db, url = site
    posts = CollectionRegistry(db).get("posts")
    assert posts is not None
    before = status_row(db, posts.id)
    ran = cli("work", "retry", "--collection", "posts", "--content-id", "does-not-exist", url=url)
    assert ran.code == 1 and "no such entry 'does-not-exist'" in ran.errors[0], ran.err
    assert "--force" in ran.errors[0]
    assert get_work(db, posts.id, "does-not-exist") is None
    assert status_row(db, posts.id) == before
    forced = cli(
        "work", "retry", "--collection", "posts", "--content-id", "does-not-exist", "--force",
        url=url,
    )  # fmt: skip
    assert forced.code == 0 and "pending" in forced.out, forced.err
    assert get_work(db, posts.id, "does-not-exist")["state"] == "pending"


def test_the_python_api_refuses_a_database_that_is_not_there(tmp_path: Path) -> None:
    missing = tmp_path / "no-such.db"
    with (
        pytest.raises(DatabaseNotReady, match="run media-usage db upgrade"),
        MediaUsage.connect(f"sqlite:///{missing}"),
    ):
        pass
    assert not missing.exists()  # nothing was created


def test_the_python_api_refuses_a_database_to_migrate(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    sa.create_engine(f"sqlite:///{empty}").connect().close()
    with (
        pytest.raises(DatabaseNotReady, match="db upgrade"),
        MediaUsage.connect(f"sqlite:///{empty}"),
    ):
        pass
