"""Sources beyond content, as pure data: identities that no collection can share, validation
before any SQL exists, and what extraction finds in a source's columns."""

from __future__ import annotations

import json

import pytest

from media_usage_worker.domain.content_model import COLLECTION_SLUG_PATTERN
from media_usage_worker.domain.errors import InvalidSource, UnreadableValue
from media_usage_worker.domain.extraction import MediaUrls, extract, extraction_fields
from media_usage_worker.domain.host_sources import (
    BUILT_IN,
    ColumnKind,
    HostSource,
    SourceKind,
    built_in_for,
    built_in_gap,
    is_source_scope,
    kind_label,
    parse_columns,
    scope_table,
)

FILE_URL = "/_emdash/api/media/file/"
URLS = MediaUrls((FILE_URL,), {"a.png": "m-a", "b.png": "m-b"}.get)


def source(*columns: tuple[str, ColumnKind], table: str = "menus") -> HostSource:
    return HostSource(SourceKind.TABLE, table, "id", columns).validated()


def found(fields_source: HostSource, row: dict[str, object]) -> set[tuple[str, str | None]]:
    fields = extraction_fields(fields_source.fields())
    return {(o.field_path, o.media_id) for o in extract(fields, row, urls=URLS)}


def test_a_sources_identity_is_never_a_collections() -> None:
    for built_in in BUILT_IN:
        built_in.validated()
        assert is_source_scope(built_in.scope_key)
        assert not COLLECTION_SLUG_PATTERN.fullmatch(built_in.scope_key)
        assert built_in.collection_id.startswith("source-")
        named = scope_table(built_in.scope_key)
        assert (named.table, named.key_column) == (built_in.table, built_in.key_column)
    assert [kind_label(b.scope_key) for b in BUILT_IN] == ["settings", "user", "byline"]
    assert kind_label(source(("x", ColumnKind.URL)).scope_key) == "table:menus"
    assert kind_label("posts") == "content"


@pytest.mark.parametrize(
    "scope", ["settings:options", "nope:options:name", "table:Menus:id", "table:m;d:id"]
)
def test_a_scope_key_that_is_not_a_sources_is_refused(scope: str) -> None:
    with pytest.raises(InvalidSource):
        scope_table(scope)


@pytest.mark.parametrize(
    ("table", "columns", "says"),
    [
        ("menus", (), "no column"),
        ("Menus", (("x", ColumnKind.URL),), "must match"),
        ("menus", (("id", ColumnKind.URL),), "is the key"),
        ("menus", (("x", ColumnKind.URL), ("x", ColumnKind.JSON)), "twice"),
        ("menus", (("status", ColumnKind.URL),), "standard content column"),
        ("m" * 58, (("x", ColumnKind.URL),), "must match"),
    ],
)
def test_a_source_is_validated_before_any_sql(
    table: str, columns: tuple[tuple[str, ColumnKind], ...], says: str
) -> None:
    with pytest.raises(InvalidSource, match=says):
        HostSource(SourceKind.TABLE, table, "id", columns).validated()


def test_columns_as_an_operator_writes_them() -> None:
    assert parse_columns(["a=json", "b=url", "c=media_id"]) == (
        ("a", ColumnKind.JSON), ("b", ColumnKind.URL), ("c", ColumnKind.MEDIA_ID),
    )  # fmt: skip
    for bad, says in [("a", "column=kind"), ("a=blob", "unknown kind"), ("A;=json", "must")]:
        with pytest.raises(InvalidSource, match=says):
            parse_columns([bad])


def test_a_json_column_is_searched_whole() -> None:
    menus = source(("items", ColumnKind.JSON))
    value = {
        "logo": {"mediaId": "m-logo", "alt": "x"},
        "hero": {"id": "m-hero", "provider": "local", "src": FILE_URL + "a.png"},
        "deep": [[[{"icon": FILE_URL + "b.png"}]]],
        "plain": {"id": "not-media"},  # an id alone is any row's id, not a media value
        "external": {"mediaId": "x", "provider": "external"},
        "word": "m-word",
    }
    assert found(menus, {"items": json.dumps(value)}) == {
        ("items.logo.mediaId", "m-logo"),
        ("items.hero", "m-hero"),
        ("items.hero.src", "m-a"),  # a URL to another file than the value's id: a use too
        ("items.deep[0][0][0].icon", "m-b"),
    }


def test_text_that_is_not_json_is_searched_as_one_string() -> None:
    menus = source(("items", ColumnKind.JSON))
    assert found(menus, {"items": "{not json"}) == set()
    assert found(menus, {"items": FILE_URL + "a.png"}) == {("items", "m-a")}
    # Past any parser's depth: not readable whole, so the entry fails (never "no reference").
    for deep in ("[" * 100_000 + "]" * 100_000, "[" * 300 + "]" * 300):
        with pytest.raises(UnreadableValue):
            found(menus, {"items": deep})


def test_an_id_column_and_a_url_column() -> None:
    users = source(("avatar", ColumnKind.MEDIA_ID), ("link", ColumnKind.URL))
    assert found(users, {"avatar": "m-1", "link": FILE_URL + "a.png"}) == {
        ("avatar", "m-1"),
        ("link", "m-a"),
    }
    # A bare word in a URL column is no reference; a URL in an id column names its file.
    assert found(users, {"avatar": FILE_URL + "b.png", "link": "m-2"}) == {("avatar", "m-b")}
    assert found(users, {"avatar": None, "link": None}) == set()


def test_a_kind_as_an_operator_names_it() -> None:
    from media_usage_worker.domain.host_sources import checked_kind

    for good in ("settings", "user", "byline", "table:menu_items"):
        assert checked_kind(good) == good
    for bad in ("content", "posts", "table:", "table:Menus", "table:a;b", None):
        with pytest.raises(InvalidSource):
            checked_kind(bad)


def test_a_built_in_source_is_read_only_over_a_table_in_its_shape() -> None:
    user = next(s for s in BUILT_IN if s.kind == SourceKind.USER)
    emdash = built_in_for(user, {"id", "email", "avatar_url"})
    assert emdash is not None and emdash.columns == (("avatar_url", ColumnKind.URL),)
    assert built_in_gap(user, {"id", "email", "avatar_url"}, emdash) is None
    assert built_in_gap(user, None, emdash) == "table users is not in the database"
    no_avatar = built_in_gap(user, {"id", "email"}, emdash)
    assert no_avatar is not None and "avatar_url or avatar_id" in no_avatar
    assert "no id key" in (built_in_gap(user, {"avatar_url"}, None) or "")
    # Registered over other columns than the table has now: read again by the next tick.
    both = built_in_for(user, {"id", "avatar_url", "avatar_id"})
    moved = built_in_gap(user, {"id", "avatar_url"}, both)
    assert moved is not None and "now avatar_url" in moved
    assert built_in_gap(user, {"id", "avatar_url"}, None) is not None  # not registered yet


def test_a_scope_key_is_parsed_once_into_a_scope() -> None:
    from media_usage_worker.domain.host_sources import Scope

    posts = Scope.of("posts")
    assert (posts.is_content, posts.label, posts.table, posts.key_column) == (
        True, "content", "ec_posts", "id",
    )  # fmt: skip
    menus = Scope.of("table:menus:menu_id")
    assert (menus.is_content, menus.kind, menus.label) == (False, SourceKind.TABLE, "table:menus")
    assert (menus.table, menus.key_column) == ("menus", "menu_id")
    assert Scope.of("table:menus:menu_id") is menus  # parsed once, then remembered
    assert [Scope.of(b.scope_key).label for b in BUILT_IN] == ["settings", "user", "byline"]
    for bad in ("table:menus", "nothing:menus:id", "content:posts:id", "table:Menus:id",
                "table:menus:id; drop"):  # fmt: skip
        with pytest.raises(InvalidSource):
            Scope.of(bad)
