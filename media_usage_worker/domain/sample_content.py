"""Realistic sample content for the demo and the benchmarks: pure data, no I/O.

Two collections whose entries carry about five media references each, through every field kind
the index reads (image, file, repeater of images, portableText image and gallery blocks, and a
custom ``marketing.gallery`` block whose media URLs a declared reference path finds), with a
share of unpublished drafts, drafts over published entries, trashed entries and provider-hosted
assets.
Deterministic for a given seed, so runs can be compared.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from media_usage_worker.domain.content_model import FieldDefinition

_GALLERY = {"subFields": [{"slug": "image", "type": "image"}]}
COLLECTIONS: dict[str, list[FieldDefinition]] = {
    "articles": [
        FieldDefinition("title", "Title", "string"),
        FieldDefinition("hero", "Hero image", "image"),
        FieldDefinition("attachment", "Attachment", "file"),
        FieldDefinition("gallery", "Gallery", "repeater", validation=_GALLERY),
        FieldDefinition("body", "Body", "portableText"),
    ],
    "products": [
        FieldDefinition("title", "Title", "string"),
        FieldDefinition("photo", "Photo", "image"),
        FieldDefinition("manual", "Manual", "file"),
        FieldDefinition("images", "Images", "repeater", validation=_GALLERY),
    ],
}
# The site's declared reference paths: its custom block keeps media as URLs of media files.
DECLARED_PATHS: dict[str, list[str]] = {
    "articles": ["body[_type=marketing.gallery].items[].imageUrl"],
}
MEDIA_POOL = 500
MEDIA_FILE_URL = "/_emdash/api/media/file/"


@dataclass(frozen=True)
class SampleEntry:
    """One content row (column → value) and, for drafts, its draft revision's data."""

    collection: str
    row: dict[str, Any]
    draft: dict[str, Any] | None


def media_library() -> list[dict[str, Any]]:
    """The ``media`` rows of every library item the sample entries reference by id."""
    kinds = (("jpg", "image/jpeg"), ("pdf", "application/pdf"), ("mp4", "video/mp4"))
    rows = []
    for n in range(MEDIA_POOL):
        extension, mime_type = kinds[n % len(kinds)]
        filename = f"media-{n:04d}.{extension}"
        rows.append(
            {"id": f"media-{n:04d}", "filename": filename, "mime_type": mime_type,
             "storage_key": filename}
        )  # fmt: skip
    return rows


def _library_id(rng: random.Random) -> str:
    """The id of one of ``media_library``'s items."""
    return f"media-{rng.randrange(MEDIA_POOL):04d}"


def _image(rng: random.Random) -> Any:
    n = rng.randrange(MEDIA_POOL)
    if rng.random() < 0.1:
        return {"provider": "cloudinary", "id": f"cld-{n}", "mimeType": "image/jpeg"}
    return f"media-{n:04d}"


def _file(rng: random.Random) -> Any:
    return {"id": _library_id(rng), "mimeType": rng.choice(["application/pdf", "video/mp4"])}


def _portable_text(rng: random.Random) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"_type": "block", "_key": "intro", "children": []}]
    for i in range(rng.randrange(3)):
        blocks.append({"_type": "image", "_key": f"img{i}", "asset": {"_ref": _library_id(rng)}})
    if rng.random() < 0.3:  # a core gallery block: each of its images is a use
        images = [
            {"_key": f"g{i}", "asset": {"_ref": _library_id(rng)}}
            for i in range(rng.randrange(1, 4))
        ]
        blocks.append({"_type": "gallery", "_key": "gallery", "images": images})
    if rng.random() < 0.2:  # a custom block: found by a declared path, its URLs resolved
        library = media_library()
        items = [
            {"imageUrl": MEDIA_FILE_URL + library[rng.randrange(MEDIA_POOL)]["storage_key"]}
            for _ in range(rng.randrange(1, 3))
        ]
        blocks.append({"_type": "marketing.gallery", "_key": "promo", "items": items})
    return blocks


def _fields(collection: str, rng: random.Random, index: int) -> dict[str, Any]:
    repeater = [{"image": _image(rng)} for _ in range(rng.randrange(1, 4))]
    if collection == "articles":
        return {
            "title": f"Article {index}",
            "hero": _image(rng),
            "attachment": _file(rng) if rng.random() < 0.5 else None,
            "gallery": json.dumps(repeater),
            "body": json.dumps(_portable_text(rng)),
        }
    return {
        "title": f"Product {index}",
        "photo": _image(rng),
        "manual": _file(rng),
        "images": json.dumps(repeater),
    }


def _column_values(values: dict[str, Any]) -> dict[str, Any]:
    """Image and file columns hold JSON text when the reference is an object."""
    return {k: json.dumps(v) if isinstance(v, dict) else v for k, v in values.items()}


def sample_entries(count: int, *, seed: int = 1, start: int = 0) -> Iterator[SampleEntry]:
    """``count`` entries alternating over the sample collections, numbered from ``start``."""
    rng = random.Random(seed)
    names = sorted(COLLECTIONS)
    for index in range(start, start + count):
        collection = names[index % len(names)]
        values = _fields(collection, rng, index)
        roll = rng.random()
        row = {
            "id": f"{collection[0]}{index:07d}",
            "slug": f"{collection}-{index}",
            "status": "draft" if roll < 0.1 else "published",
            "deleted_at": None,
            **_column_values(values),
        }
        draft = None
        if roll < 0.25:  # unpublished drafts and drafts over a published entry
            draft = {**values, "title": f"{values['title']} (draft)"}
            image_field = "hero" if collection == "articles" else "photo"
            draft[image_field] = _image(rng)
        if 0.25 <= roll < 0.30:
            row["deleted_at"] = "2026-01-01T00:00:00.000Z"  # trashed: indexed as deleted
        yield SampleEntry(collection, row, draft)


# The sample site beyond its collections: site settings, a user and a byline with avatars,
# and a menu table the demo declares as a source (docs/operations.md, "Sources").
SAMPLE_SETTINGS: dict[str, Any] = {
    "site:favicon": {"mediaId": "media-0000", "alt": ""},
    "site:logo": {"mediaId": "media-0003", "alt": "Logo"},
    "site:seo": {"defaultImage": {"id": "media-0012", "provider": "local"}},
}
SAMPLE_USERS = (("user-ada", "ada@example.org", "Ada", "media-0006"),)
SAMPLE_BYLINES = (("byline-ada", "ada", "Ada Lovelace", "media-0009"),)
SAMPLE_MENU_TABLE = "sample_menu_items"
SAMPLE_MENU = (
    ("menu-home", [{"label": "Home", "icon": {"mediaId": "media-0015"}}],
     "/_emdash/api/media/file/media-0018.jpg"),
    ("menu-about", [{"label": "About"}], None),
)  # fmt: skip
