"""Slug and field validation: pure, before any SQL."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from media_usage_worker.domain.content_model import (
    COLUMN_TYPE_BY_FIELD_TYPE,
    FieldDefinition,
    validate_collection_slug,
    validate_field_slug,
    validate_fields,
)
from media_usage_worker.domain.errors import InvalidArgument, InvalidSlug


@pytest.mark.parametrize("slug", ["posts", "a", "blog_posts_2", "a" * 40])
def test_valid_collection_slugs(slug: str) -> None:
    assert validate_collection_slug(slug) == slug


@pytest.mark.parametrize(
    "slug", ["Posts", "a-b", "x; drop table t", "", "a" * 41, "1abc", "_x", "media", None, 3]
)
def test_invalid_collection_slugs(slug: object) -> None:
    with pytest.raises(InvalidSlug):
        validate_collection_slug(slug)


@pytest.mark.parametrize("slug", ["id", "status", "version", "deleted_at", "terms", "x" * 64, "A"])
def test_invalid_field_slugs(slug: str) -> None:
    with pytest.raises(ValueError):
        validate_field_slug(slug)


@given(st.text(max_size=80))
def test_accepted_slugs_are_safe_identifiers(slug: str) -> None:
    try:
        validate_collection_slug(slug)
    except InvalidSlug:
        return
    assert slug.isascii() and slug[0].isalpha() and all(c.isalnum() or c == "_" for c in slug)
    assert len(f"ec_{slug}") <= 63


def test_column_types_follow_emdash() -> None:
    assert FieldDefinition("hero", "Hero", "image").column_type == "TEXT"
    assert FieldDefinition("doc", "Doc", "file").column_type == "TEXT"
    assert FieldDefinition("n", "N", "number").column_type == "REAL"
    assert FieldDefinition("b", "B", "boolean").column_type == "INTEGER"
    assert {COLUMN_TYPE_BY_FIELD_TYPE[t] for t in ("portableText", "repeater", "json")} == {"JSON"}


@pytest.mark.parametrize(
    "fields",
    [
        "not a list",
        [{"slug": "x", "type": "string"}],
        [FieldDefinition("x", "", "string")],
        [FieldDefinition("x", "X", "nope")],
        [FieldDefinition("x", "X", "string", required="yes")],  # type: ignore[arg-type]
        [FieldDefinition("x", "X", "json", validation=["a"])],  # type: ignore[arg-type]
        [FieldDefinition("x", "X", "repeater", validation={"subFields": [{"type": "image"}]})],
        [FieldDefinition("x", "X", "string"), FieldDefinition("x", "Y", "string")],
    ],
)
def test_invalid_field_lists(fields: object) -> None:
    with pytest.raises(InvalidArgument):
        validate_fields(fields)
