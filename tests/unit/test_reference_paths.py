"""Declared reference paths and media file URLs: parsing, walking, extraction (no servers)."""

from __future__ import annotations

import pytest

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.errors import InvalidRule
from media_usage_worker.domain.extraction import (
    DECLARED_PATH,
    ExtractionField,
    MediaUrls,
    extract,
    extraction_fields,
)
from media_usage_worker.domain.reference_paths import (
    Step,
    media_file_key,
    parse_reference_path,
    validate_media_url_prefix,
)

MARKETING = "body[_type=marketing.gallery].items[].imageUrl"
LIBRARY = {"photo.jpg": "m-photo", "poster a.png": "m-poster"}
URLS = MediaUrls(("https://cdn.example.com/media/",), LIBRARY.get)


def test_each_step_form_parses() -> None:
    path = parse_reference_path(MARKETING)
    assert path.field_slug == "body"
    assert path.steps == (
        Step(match_key="_type", match_value="marketing.gallery"),
        Step(key="items"),
        Step(),
        Step(key="imageUrl"),
    )
    assert parse_reference_path("settings.favicon.mediaId").steps == (
        Step(key="favicon"),
        Step(key="mediaId"),
    )
    assert parse_reference_path("cover_url").steps == ()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "1 to 300 characters"),
        ("x" * 301, "1 to 300 characters"),
        ("Body.items", "must start with a field slug"),
        ("body..items", "cannot read '..items' at character 5"),
        ("body[_type=x", "cannot read '[_type=x'"),
        ("body[0]", "cannot read '[0]'"),
        ("body.items[]extra", "cannot read 'extra'"),
        ("body[a=b c]", "cannot read"),
        ("body" + ".k" * 17, "more than 16 steps"),
        (None, "1 to 300 characters"),
    ],
)
def test_a_malformed_path_is_one_clear_error(text: object, says: str) -> None:
    with pytest.raises(InvalidRule, match=None) as raised:
        parse_reference_path(text)
    assert says in str(raised.value)
    assert "\n" not in str(raised.value)


def test_walking_names_each_concrete_path_and_skips_odd_data() -> None:
    body = [
        {"_type": "other.gallery", "items": [{"imageUrl": "not this type"}]},
        {"_type": "marketing.gallery", "items": [{"imageUrl": "a"}, "odd", {"imageUrl": "b"}]},
        {"_type": "marketing.gallery", "items": {"not": "a list"}},
        "not a block",
    ]
    walked = list(parse_reference_path(MARKETING).walk(body))
    assert walked == [("body[1].items[0].imageUrl", "a"), ("body[1].items[2].imageUrl", "b")]
    assert list(parse_reference_path(MARKETING).walk({"a": 1})) == []
    assert list(parse_reference_path("s.k").walk({"k": None})) == [("s.k", None)]


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("/_emdash/api/media/file/photo.jpg", "photo.jpg"),
        ("/_emdash/api/media/file/photo.jpg?w=200#top", "photo.jpg"),
        ("https://cdn.example.com/media/poster%20a.png", "poster a.png"),
        ("  https://cdn.example.com/media/x/y.jpg ", "x/y.jpg"),
        ("https://cdn.example.com/other/photo.jpg", None),
        ("https://elsewhere.example/_emdash/api/media/file/photo.jpg", None),
        ("/_emdash/api/media/file/", None),
        ("/_emdash/api/media/file/%00", None),
    ],
)
def test_media_file_key(value: str, key: str | None) -> None:
    assert media_file_key(value, ("https://cdn.example.com/media/",)) == key


@pytest.mark.parametrize("prefix", ["https://cdn.example.com/media/", "/uploads/", "http://a/"])
def test_valid_prefixes(prefix: str) -> None:
    assert validate_media_url_prefix(prefix) == prefix


@pytest.mark.parametrize(
    "prefix", ["ftp://x/", "https://cdn.example.com/media", "uploads/", "/a b/", " /a/", "/", 7]
)
def test_invalid_prefixes(prefix: object) -> None:
    with pytest.raises(InvalidRule):
        validate_media_url_prefix(prefix)


def test_a_declared_path_in_a_portable_text_field() -> None:
    body = [
        {"_type": "image", "asset": {"_ref": "m-inline"}},
        {"_type": "marketing.gallery", "items": [
            {"imageUrl": "/_emdash/api/media/file/photo.jpg"},  # a library file: its media id
            {"imageUrl": "/_emdash/api/media/file/gone.jpg"},  # no such file: no reference
            {"imageUrl": "https://images.example.org/x.jpg"},  # external: no reference
            {"imageUrl": "m-by-id"},  # a plain media id
        ]},
    ]  # fmt: skip
    field = ExtractionField("body", "portableText", (), (parse_reference_path(MARKETING),))
    found = {
        (o.field_path, o.reference_type, o.media_id)
        for o in extract([field], {"body": body}, urls=URLS)
    }
    assert found == {
        ("body[0].asset._ref", "portable_text_image", "m-inline"),
        ("body[1].items[0].imageUrl", DECLARED_PATH, "m-photo"),
        ("body[1].items[3].imageUrl", DECLARED_PATH, "m-by-id"),
    }


def test_a_declared_path_in_a_json_field_reads_objects_like_an_image_field() -> None:
    field = ExtractionField("settings", "json", (), (parse_reference_path("settings.favicon"),))
    data = {"settings": {"favicon": {"id": "m-icon", "mimeType": "image/x-icon"}}}
    (found,) = extract([field], data, urls=URLS)
    assert (found.field_path, found.media_id, found.media_kind) == (
        "settings.favicon",
        "m-icon",
        "image",
    )
    data = {"settings": {"favicon": {"provider": "external", "id": "https://x/y.ico"}}}
    assert extract([field], data, urls=URLS) == []


def test_media_urls_resolve_in_image_fields_only_under_known_prefixes() -> None:
    hero = ExtractionField("hero", "image")
    cases = {
        "https://cdn.example.com/media/photo.jpg": "m-photo",
        "https://cdn.example.com/media/unknown.jpg": None,
        "https://images.example.org/photo.jpg": None,
    }
    for value, media_id in cases.items():
        found = [o.media_id for o in extract([hero], {"hero": value}, urls=URLS)]
        assert found == ([media_id] if media_id else []), value
    # Without a resolver no URL is a reference (emdash 0.34's rule).
    assert extract([hero], {"hero": "/_emdash/api/media/file/photo.jpg"}) == []


def test_declared_paths_join_the_extraction_schema_of_any_field_type() -> None:
    fields = [
        FieldDefinition("settings", "Settings", "json", reference_paths=("settings.favicon",)),
        FieldDefinition("title", "Title", "string"),
        FieldDefinition("body", "Body", "portableText", reference_paths=(MARKETING,)),
    ]
    extracted = extraction_fields(fields)
    assert [f.slug for f in extracted] == ["body", "settings", "title"]
    assert extracted[0].schema() == {
        "slug": "body",
        "type": "portableText",
        "declaredPaths": [MARKETING],
    }
    assert "declaredPaths" not in ExtractionField("hero", "image").schema()
