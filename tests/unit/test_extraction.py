"""Extraction rules of facts sheet §5, one test per rule, plus a property test."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.errors import EntryTooLarge
from media_usage_worker.domain.extraction import (
    ExtractionField,
    FieldDiscoveryError,
    extract,
    extraction_fields,
    media_kind,
    normalize_mime,
)

IMAGE = ExtractionField("hero", "image")
FILE = ExtractionField("doc", "file")
GALLERY = ExtractionField("gallery", "repeater", ("image", "thumb"))
BODY = ExtractionField("body", "portableText")


def one(field: ExtractionField, value: object):
    found = extract([field], {field.slug: value})
    assert len(found) <= 1
    return found[0] if found else None


def test_fields_considered_and_sorted() -> None:
    fields = [
        FieldDefinition("z_img", "Z", "image"),
        FieldDefinition("a_file", "A", "file"),
        FieldDefinition("body", "B", "portableText"),
        FieldDefinition("title", "T", "string"),
        FieldDefinition("tags", "T", "json"),
        FieldDefinition(
            "gallery",
            "G",
            "repeater",
            validation={
                "subFields": [
                    {"slug": "thumb", "type": "image"},
                    {"slug": "caption", "type": "string"},
                    {"slug": "image", "type": "image"},
                    {"type": "image"},
                ]
            },
        ),
        FieldDefinition(
            "links", "L", "repeater", validation={"subFields": [{"slug": "u", "type": "url"}]}
        ),
        FieldDefinition("plain", "P", "repeater"),
    ]
    # Every field that can hold text is read: its strings are searched for media file URLs.
    assert extraction_fields([*fields, FieldDefinition("n", "N", "number")]) == [
        ExtractionField("a_file", "file"),
        ExtractionField("body", "portableText"),
        ExtractionField("gallery", "repeater", ("image", "thumb")),
        ExtractionField("links", "repeater"),
        ExtractionField("plain", "repeater"),
        ExtractionField("tags", "json"),
        ExtractionField("title", "string"),
        ExtractionField("z_img", "image"),
    ]


def test_invalid_repeater_validation_is_a_discovery_error() -> None:
    broken = FieldDefinition("g", "G", "repeater", validation_unreadable=True)
    with pytest.raises(FieldDiscoveryError):
        extraction_fields([broken])


def test_bare_string_is_a_local_media_id() -> None:
    found = one(IMAGE, "  01MEDIA  ")
    assert (found.media_id, found.provider, found.provider_asset_id) == (
        "01MEDIA",
        "local",
        "01MEDIA",
    )
    assert (found.field_path, found.reference_type, found.media_kind, found.mime_type) == (
        "hero",
        "image_field",
        "image",
        None,
    )


def test_object_reference_with_provider_and_mime() -> None:
    found = one(
        IMAGE,
        {
            "provider": " cloudinary ",
            "id": "folder/pic",
            "mimeType": "Image/PNG; q=1",
            "src": "https://ignored",
        },
    )
    assert (found.provider, found.provider_asset_id, found.media_id) == (
        "cloudinary",
        "folder/pic",
        None,
    )
    assert (found.mime_type, found.media_kind) == ("image/png", "image")


@pytest.mark.parametrize(
    "value",
    [
        None,
        3,
        True,
        [],
        ["m1"],
        "",
        "   ",
        "https://cdn/x.png",
        "HTTP://x",
        "//cdn/x",
        "data:image/png;base64,xx",
        "/_emdash/api/media/file/abc",
        "dir/file",
        {"id": "a/b"},
        {"provider": "external", "id": "x"},
        {"id": 5},
        {"provider": "s3"},
        {"provider": "s3", "id": "mailto:x"},
    ],
)
def test_values_that_are_not_references(value: object) -> None:
    assert one(IMAGE, value) is None


def test_provider_normalisation() -> None:
    assert one(IMAGE, {"provider": 7, "id": "m"}).provider == "local"
    assert one(IMAGE, {"provider": "  ", "id": "m"}).provider == "local"
    assert one(IMAGE, {"provider": "External", "id": "x/y"}).provider == "External"


def test_file_fields_have_no_fallback_kind() -> None:
    assert one(FILE, "m1").media_kind is None
    found = one(FILE, {"id": "m1", "mimeType": "application/pdf"})
    assert (found.reference_type, found.media_kind) == ("file_field", "document")


@pytest.mark.parametrize(
    ("mime", "kind"),
    [
        ("image/webp", "image"),
        ("video/mp4", "video"),
        ("audio/ogg", "audio"),
        ("font/woff2", "font"),
        ("application/font-woff", "font"),
        ("text/plain", "text"),
        ("application/pdf", "document"),
        ("application/msword", "document"),
        ("application/vnd.openxmlformats-officedocument.wordprocessingml.document", "document"),
        ("application/zip", "archive"),
        ("application/vnd.rar", "archive"),
        ("application/json", "other"),
    ],
)
def test_media_kind(mime: str, kind: str) -> None:
    assert media_kind(mime, None) == kind


def test_mime_without_slash_is_dropped() -> None:
    assert normalize_mime("png") is None and normalize_mime(None) is None
    assert one(IMAGE, {"id": "m", "mimeType": "png"}).media_kind == "image"


def test_repeater_paths_skip_non_objects_but_keep_positions() -> None:
    value = [{"image": "m1", "thumb": "m2"}, "junk", None, {"image": {"id": "m3"}, "other": "m9"}]
    found = extract([GALLERY], {"gallery": value})
    assert [(o.field_slug, o.field_path, o.media_id) for o in found] == [
        ("gallery", "gallery[0].image", "m1"),
        ("gallery", "gallery[0].thumb", "m2"),
        ("gallery", "gallery[3].image", "m3"),
    ]
    assert extract([GALLERY], {"gallery": {"image": "m1"}}) == []


def test_portable_text_image_blocks() -> None:
    value = [
        {"_type": "block", "children": [{"_type": "image", "asset": {"_ref": "nested"}}]},
        {"_type": "image", "asset": {"_ref": "m1", "mimeType": "image/jpeg"}},
        {"_type": "image", "asset": {"_ref": "https://bad", "id": "m2"}},
        {"_type": "image", "asset": "m3"},
        {"_type": "image"},
        {"_type": "image", "asset": {"provider": "s3", "_ref": "a/b"}},
        "text",
    ]
    found = extract([BODY], {"body": value})
    assert [(o.field_path, o.provider_asset_id, o.reference_type) for o in found] == [
        ("body[1].asset._ref", "m1", "portable_text_image"),
        ("body[2].asset.id", "m2", "portable_text_image"),
        ("body[5].asset._ref", "a/b", "portable_text_image"),
    ]
    assert found[0].mime_type == "image/jpeg" and found[1].media_kind == "image"


def test_duplicates_are_dropped_but_same_media_in_two_places_is_kept() -> None:
    found = extract([IMAGE, GALLERY], {"hero": "m1", "gallery": [{"image": "m1"}, {"image": "m1"}]})
    assert [o.field_path for o in found] == ["hero", "gallery[0].image", "gallery[1].image"]


def test_occurrences_follow_field_order() -> None:
    found = extract(
        [BODY, IMAGE], {"hero": "m1", "body": [{"_type": "image", "asset": {"_ref": "m2"}}]}
    )
    assert [o.field_slug for o in found] == ["body", "hero"]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True)
    | st.text(max_size=20)
    | st.sampled_from(["m1", " m2 ", "a\x00b", "image/png", "s3", "\ud810x"]),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(
            st.sampled_from(
                ["_type", "asset", "_ref", "id", "provider", "mimeType", "image", "thumb", "x"]
            ),
            children,
            max_size=6,
        )
    ),
    max_leaves=30,
)


@given(st.dictionaries(st.sampled_from(["hero", "doc", "gallery", "body"]), json_values))
def test_extraction_never_raises_and_yields_well_formed_occurrences(data: dict) -> None:
    for occurrence in extract([BODY, FILE, GALLERY, IMAGE], data):
        assert occurrence.provider and occurrence.provider == occurrence.provider.strip()
        assert occurrence.provider != "external"
        assert (
            occurrence.provider_asset_id
            and occurrence.provider_asset_id.strip() == occurrence.provider_asset_id
        )
        if occurrence.provider == "local":
            assert (
                occurrence.media_id == occurrence.provider_asset_id
                and "/" not in occurrence.media_id
            )
        else:
            assert occurrence.media_id is None
        assert occurrence.reference_type in ("image_field", "file_field", "portable_text_image")
        assert occurrence.mime_type is None or "/" in occurrence.mime_type
        assert occurrence.field_path.startswith(occurrence.field_slug)
        payload = occurrence.payload()
        for value in payload.values():
            if isinstance(value, str):
                assert "\x00" not in value
                value.encode("utf-8")  # storable: no lone surrogates
        json.dumps(payload)


def test_extraction_stops_past_the_occurrence_limit() -> None:
    blocks = [{"_type": "image", "asset": {"_ref": f"m{i}"}} for i in range(10)]
    assert len(extract([BODY], {"body": blocks}, max_occurrences=10)) == 10
    with pytest.raises(EntryTooLarge, match="more than 9"):
        extract([BODY], {"body": blocks}, max_occurrences=9)


def test_portable_text_gallery_blocks_count_each_image() -> None:
    value = [
        {"_type": "block", "children": []},
        {
            "_type": "gallery",
            "images": [
                {"_key": "a", "asset": {"_ref": "m1", "mimeType": "image/png"}},
                {"_key": "b", "asset": {"_ref": "https://cdn.example/x.jpg", "id": "m2"}},
                "not an image",
                {"_key": "d", "asset": {"provider": "external", "_ref": "m3"}},
                {"_key": "e", "asset": {"provider": "cloudinary", "id": "folder/pic"}},
                {"_key": "f"},
            ],
        },
        {"_type": "gallery", "images": {"asset": {"_ref": "m4"}}},  # not a list: nothing
        {"_type": "image", "asset": {"_ref": "m5"}},
    ]
    found = extract([BODY], {"body": value})
    assert [(o.field_path, o.provider, o.provider_asset_id, o.media_id) for o in found] == [
        ("body[1].images[0].asset._ref", "local", "m1", "m1"),
        ("body[1].images[1].asset.id", "local", "m2", "m2"),
        ("body[1].images[4].asset.id", "cloudinary", "folder/pic", None),
        ("body[3].asset._ref", "local", "m5", "m5"),
    ]
    assert {o.reference_type for o in found} == {"portable_text_image"}
    assert (found[0].mime_type, found[0].media_kind) == ("image/png", "image")
