"""The Python read API (``media_usage_worker.api``, docs/api.md) on both dialects: counts for
many ids, ``is_unused`` that says "nowhere" only under complete coverage, pages, status."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from media_usage_worker.api import MAX_IDS, MediaUsage
from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.errors import InvalidArgument
from tests.support import active_collection, drain, mark_coverage_complete


def write(engine: sa.Engine, content_id: str, hero: str, deleted_at: str | None = None) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO ec_posts (id, hero, deleted_at) VALUES (:id, :hero, :deleted)"),
            {"id": content_id, "hero": hero, "deleted": deleted_at},
        )


@pytest.fixture
def site(db: sa.Engine) -> MediaUsage:
    """Two live posts use m-a, a trashed one uses m-trashed; nothing uses m-free."""
    active_collection(db, "posts", [FieldDefinition("hero", "Hero", "image")])
    write(db, "e1", "m-a")
    write(db, "e2", "m-a")
    write(db, "e3", "m-trashed", deleted_at="2026-01-01T00:00:00.000Z")
    drain(db)
    return MediaUsage(db)


def test_nothing_is_called_unused_until_coverage_is_complete(site: MediaUsage) -> None:
    # The collection never reconciled, the empty sources complete.
    assert site.coverage().status == "partial"
    assert site.is_unused("m-free") is None
    assert site.usage_counts(["m-a", "m-free"]).counts == {"m-a": None, "m-free": None}


def test_counts_and_unused_under_complete_coverage(db: sa.Engine, site: MediaUsage) -> None:
    mark_coverage_complete(db)
    counted = site.usage_counts(["m-a", "m-free", "m-trashed", "m-a"])
    assert counted.coverage.complete
    assert counted.counts == {"m-a": 2, "m-free": 0, "m-trashed": 0}
    assert site.usage_count("m-a") == 2
    assert (site.is_unused("m-a"), site.is_unused("m-free")) == (False, True)
    # A trashed entry is not a use (it would go with the entry), as emdash counts it.
    assert site.is_unused("m-trashed") is True
    assert site.usage_counts([]).counts == {}


def test_usage_pages_follow_the_cursor(site: MediaUsage) -> None:
    first = site.usage("m-a", limit=1)
    assert [e.content_id for e in first.entries] == ["e1"]
    assert first.next_cursor is not None
    second = site.usage("m-a", limit=1, cursor=first.next_cursor)
    assert [e.content_id for e in second.entries] == ["e2"]
    assert second.next_cursor is None
    trashed = site.usage("m-trashed").entries
    assert [(e.content_id, e.deleted_at is not None) for e in trashed] == [("e3", True)]


def test_status_overview(db: sa.Engine, site: MediaUsage) -> None:
    overview = site.status()
    # The collection never reconciled, the empty sources complete.
    assert (overview.capture, overview.coverage) == ("active", "partial")
    assert [(c.kind, c.slug) for c in overview.collections] == [("content", "posts")]
    # The sources beyond content, apart: their coverage counts all the same.
    assert [(c.kind, c.slug) for c in overview.sources] == [
        ("byline", "byline:_emdash_bylines:id"), ("settings", "settings:options:name"),
        ("user", "user:users:id"),
    ]  # fmt: skip
    mark_coverage_complete(db)
    assert site.status().coverage == "complete"


@pytest.mark.parametrize(
    "call",
    [
        lambda api: api.usage_counts(["ok", ""]),
        lambda api: api.usage_counts("m-a"),  # a string is not a list of ids
        lambda api: api.usage_counts([f"m{i}" for i in range(MAX_IDS + 1)]),
        lambda api: api.usage_counts([None]),
        lambda api: api.is_unused("x" * 10_000),
        lambda api: api.usage("m-a", limit=0),
        lambda api: api.usage("m-a", cursor="not-a-cursor"),
    ],
)
def test_bad_input_is_refused_before_any_statement(db: sa.Engine, call) -> None:
    statements: list[str] = []
    sa.event.listen(db, "before_cursor_execute", lambda *a: statements.append(a[2]))
    with pytest.raises(InvalidArgument):
        call(MediaUsage(db))
    assert statements == []


def test_connect_opens_and_disposes_its_engine(migrated_url: str) -> None:
    with MediaUsage.connect(migrated_url) as index:
        # Nothing is indexed yet: only the built-in sources, never reconciled.
        scopes = index.coverage().scopes
        assert [(s.kind, s.status) for s in scopes] == [
            ("byline", "never"), ("settings", "never"), ("user", "never"),
        ]  # fmt: skip
