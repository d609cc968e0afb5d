"""CollectionRegistry on both dialects: the ec_ table, registry rows, status row, validation."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.errors import CollectionExists, CollectionNotFound, FieldExists
from media_usage_worker.repository.registry.collections import CollectionRegistry

GALLERY = {"subFields": [{"slug": "image", "type": "image"}, {"slug": "caption", "type": "string"}]}
FIELDS = [
    FieldDefinition("title", "Title", "string"),
    FieldDefinition("hero", "Hero", "image"),
    FieldDefinition("attachment", "Attachment", "file"),
    FieldDefinition("gallery", "Gallery", "repeater", validation=GALLERY),
    FieldDefinition("body", "Body", "portableText", required=True),
    FieldDefinition("rating", "Rating", "number"),
    FieldDefinition("featured", "Featured", "boolean"),
]
STANDARD = [
    ("id", "text"),
    ("slug", "text"),
    ("status", "text"),
    ("author_id", "text"),
    ("primary_byline_id", "text"),
    ("created_at", "text"),
    ("updated_at", "text"),
    ("published_at", "text"),
    ("scheduled_at", "text"),
    ("deleted_at", "text"),
    ("version", "integer"),
    ("live_revision_id", "text"),
    ("draft_revision_id", "text"),
    ("locale", "text"),
    ("translation_group", "text"),
]
INDEX_SUFFIXES = {
    "slug": ["slug"],
    "scheduled": ["scheduled_at"],
    "live_revision": ["live_revision_id"],
    "draft_revision": ["draft_revision_id"],
    "author": ["author_id"],
    "primary_byline": ["primary_byline_id"],
    "locale": ["locale"],
    "tg_locale": ["translation_group", "locale"],
    "del_tg_locale": ["deleted_at", "translation_group", "locale"],
    "deleted_updated_id": ["deleted_at", "updated_at", "id"],
    "deleted_status": ["deleted_at", "status"],
    "deleted_created_id": ["deleted_at", "created_at", "id"],
    "deleted_published_id": ["deleted_at", "published_at", "id"],
    "loc_upd": ["deleted_at", "locale", "updated_at", "id"],
    "loc_crt": ["deleted_at", "locale", "created_at", "id"],
}


@pytest.fixture
def registry(db: sa.Engine) -> CollectionRegistry:
    return CollectionRegistry(db)


def _snapshot(engine: sa.Engine) -> tuple:
    """Everything a failed create must leave untouched."""
    inspector = sa.inspect(engine)
    with engine.connect() as conn:
        counts = tuple(
            conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one()
            for t in ("_emdash_collections", "_emdash_fields", "_emdash_media_usage_index_status")
        )
    return sorted(inspector.get_table_names()), counts


def test_create_collection_builds_the_emdash_table(
    registry: CollectionRegistry, db: sa.Engine
) -> None:
    collection = registry.create_collection("posts", "Posts", FIELDS)
    assert (collection.slug, collection.label, len(collection.id)) == ("posts", "Posts", 26)

    inspector = sa.inspect(db)
    columns = [
        (c["name"], str(c["type"]).lower(), c["nullable"])
        for c in inspector.get_columns("ec_posts")
    ]
    expected_fields = [
        ("title", "text", True),
        ("hero", "text", True),
        ("attachment", "text", True),
        ("gallery", "json", True),
        ("body", "json", False),
        ("rating", "real", True),
        ("featured", "integer", True),
    ]
    assert [c[:2] for c in columns[: len(STANDARD)]] == STANDARD
    assert columns[len(STANDARD) :] == expected_fields
    assert {c["name"]: c["nullable"] for c in inspector.get_columns("ec_posts")}["locale"] is False

    indexes = {
        i["name"]: i["column_names"]
        for i in inspector.get_indexes("ec_posts")
        if not i.get("duplicates_constraint")
    }
    assert indexes == {f"idx_ec_posts_{suffix}": cols for suffix, cols in INDEX_SUFFIXES.items()}
    uniques = inspector.get_unique_constraints("ec_posts")
    assert [u["column_names"] for u in uniques] == [["slug", "locale"]]
    if db.dialect.name == "postgresql":
        assert uniques[0]["name"] == "ec_posts_slug_locale_unique"
    referred = {
        (fk["constrained_columns"][0], fk["referred_table"])
        for fk in inspector.get_foreign_keys("ec_posts")
    }
    assert referred == {("live_revision_id", "revisions"), ("draft_revision_id", "revisions")}

    with db.connect() as conn:
        fields = conn.execute(
            sa.text(
                "SELECT slug, type, column_type, required, validation, sort_order "
                "FROM _emdash_fields WHERE collection_id = :id ORDER BY sort_order"
            ),
            {"id": collection.id},
        ).all()
        status = conn.execute(
            sa.text(
                "SELECT status, collection_id, change_epoch, reconciliation_required, "
                "capture_state FROM _emdash_media_usage_index_status "
                "WHERE adapter_id = 'content-media' AND scope_type = 'collection' "
                "AND scope_key = 'posts'"
            )
        ).one()
    assert [(f.slug, f.type, f.column_type, f.required) for f in fields] == [
        ("title", "string", "TEXT", 0),
        ("hero", "image", "TEXT", 0),
        ("attachment", "file", "TEXT", 0),
        ("gallery", "repeater", "JSON", 0),
        ("body", "portableText", "JSON", 1),
        ("rating", "number", "REAL", 0),
        ("featured", "boolean", "INTEGER", 0),
    ]
    assert '"subFields"' in fields[3].validation
    assert tuple(status) == ("never", collection.id, 0, 1, None)


def test_defaults_of_a_content_row(registry: CollectionRegistry, db: sa.Engine) -> None:
    registry.create_collection("posts", "Posts", FIELDS)
    with db.begin() as conn:
        conn.execute(sa.text("INSERT INTO ec_posts (id) VALUES ('e1')"))
        row = conn.execute(sa.text("SELECT status, version, locale, body FROM ec_posts")).one()
    assert tuple(row)[:3] == ("draft", 1, "en")
    assert row.body is None or row.body == "null"


def test_get_list_and_fields(registry: CollectionRegistry) -> None:
    pages = registry.create_collection("pages", "Pages", FIELDS[:2])
    posts = registry.create_collection("posts", "Posts", FIELDS)
    assert registry.get("posts") == posts
    assert registry.get("nope") is None
    assert registry.get_by_id(pages.id) == pages
    assert registry.list() == [pages, posts]
    assert registry.fields(posts.id) == FIELDS


def test_create_field_adds_the_column_and_invalidates_coverage(
    registry: CollectionRegistry, db: sa.Engine
) -> None:
    collection = registry.create_collection("posts", "Posts", FIELDS[:1])
    with db.begin() as conn:
        conn.execute(sa.text("INSERT INTO ec_posts (id, title) VALUES ('e1', 'x')"))
        conn.execute(
            sa.text(
                "UPDATE _emdash_media_usage_index_status SET status = 'complete', "
                "reconciliation_required = 0, completed_at = 'c'"
            )
        )
    registry.create_field("posts", FieldDefinition("cover", "Cover", "image", required=True))
    registry.create_field("posts", FieldDefinition("blocks", "Blocks", "portableText"))

    columns = {c["name"]: c for c in sa.inspect(db).get_columns("ec_posts")}
    assert columns["cover"]["nullable"] is False and columns["blocks"]["nullable"] is True
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT cover FROM ec_posts")).scalar_one() == ""
        status = conn.execute(
            sa.text(
                "SELECT status, change_epoch, reconciliation_required, completed_at, "
                "last_error_code FROM _emdash_media_usage_index_status"
            )
        ).one()
    assert tuple(status) == ("stale", 2, 1, None, "CONTENT_USAGE_STALE")
    assert [f.slug for f in registry.fields(collection.id)] == ["title", "cover", "blocks"]


def test_create_field_errors_change_nothing(registry: CollectionRegistry, db: sa.Engine) -> None:
    registry.create_collection("posts", "Posts", FIELDS[:1])
    before = _snapshot(db)
    with pytest.raises(FieldExists):
        registry.create_field("posts", FieldDefinition("title", "Again", "string"))
    with pytest.raises(CollectionNotFound):
        registry.create_field("pages", FieldDefinition("hero", "Hero", "image"))
    with pytest.raises(ValueError):
        registry.create_field("posts", FieldDefinition("Bad-Slug", "Bad", "image"))
    with pytest.raises(ValueError):
        registry.create_field("posts", FieldDefinition("hero", "Hero", "hologram"))
    assert _snapshot(db) == before


@pytest.mark.parametrize(
    ("slug", "fields"),
    [
        ("Posts", []),
        ("a-b", []),
        ("x; drop table t", []),
        ("", []),
        ("p" * 41, []),
        ("p" * 64, []),
        ("media", []),
        ("posts", [FieldDefinition("status", "Status", "string")]),
        ("posts", [FieldDefinition("deleted_at", "Deleted", "string")]),
        ("posts", [FieldDefinition("x" * 64, "Long", "string")]),
        ("posts", [FieldDefinition("hero", "Hero", "image"), FieldDefinition("hero", "H", "file")]),
        ("posts", [FieldDefinition("g", "G", "repeater", validation={"subFields": "nope"})]),
    ],
)
def test_invalid_input_raises_value_error_and_creates_nothing(
    registry: CollectionRegistry, db: sa.Engine, slug: str, fields: list
) -> None:
    before = _snapshot(db)
    with pytest.raises(ValueError):
        registry.create_collection(slug, "Label", fields)
    assert _snapshot(db) == before


def test_longest_slug_fits_postgres_identifiers(
    registry: CollectionRegistry, db: sa.Engine
) -> None:
    slug = "a" * 40
    registry.create_collection(slug, "Long", FIELDS[:2])
    names = {
        i["name"]
        for i in sa.inspect(db).get_indexes(f"ec_{slug}")
        if not i.get("duplicates_constraint")
    }
    assert len(names) == len(INDEX_SUFFIXES)
    assert all(len(name) <= 63 for name in names) or db.dialect.name == "sqlite"


def test_duplicate_slug_is_refused(registry: CollectionRegistry, db: sa.Engine) -> None:
    registry.create_collection("posts", "Posts", FIELDS)
    before = _snapshot(db)
    with pytest.raises(CollectionExists):
        registry.create_collection("posts", "Posts again", [])
    assert _snapshot(db) == before


def test_concurrent_creators_of_one_slug_get_one_collection(db: sa.Engine) -> None:
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def create() -> None:
        registry = CollectionRegistry(db)
        barrier.wait(timeout=10)
        try:
            registry.create_collection("posts", "Posts", FIELDS[:1])
            outcomes.append("created")
        except CollectionExists:
            outcomes.append("exists")

    threads = [threading.Thread(target=create) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["created", "exists"]
    assert len(CollectionRegistry(db).list()) == 1


@pytest.mark.parametrize(
    "slugs",
    [
        ["foo", "foo_tg", "foo_del", "foo_deleted"],
        ["foo_deleted", "foo_del", "foo_tg", "foo"],
        ["post_slug_locale_unique", "post"],  # a table named like another's unique constraint
    ],
)
def test_slugs_whose_emdash_index_names_collide_are_all_created(
    registry: CollectionRegistry, db: sa.Engine, slugs: list[str]
) -> None:
    """``foo``'s ``tg_locale`` and ``foo_tg``'s ``locale`` are both ``idx_ec_foo_tg_locale``:
    the first table keeps emdash's name, a later one gets its slug's hash on that name."""
    for slug in slugs:
        registry.create_collection(slug, slug, FIELDS[:2])
    inspector = sa.inspect(db)
    names: dict[str, str] = {}
    for slug in slugs:
        for index in inspector.get_indexes(f"ec_{slug}"):
            if not index.get("duplicates_constraint"):
                assert names.setdefault(index["name"], slug) == slug, index["name"]
        own = [n for n, s in names.items() if s == slug]
        assert len(own) == len(INDEX_SUFFIXES)
    first = slugs[0]
    assert {f"idx_ec_{first}_{suffix}"[:63] for suffix in INDEX_SUFFIXES} <= set(names)
    with db.begin() as conn:  # every table takes writes
        for slug in slugs:
            conn.execute(sa.text(f"INSERT INTO ec_{slug} (id, slug) VALUES ('e1', 's')"))
