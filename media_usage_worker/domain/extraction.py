"""Media reference extraction (docs/design.md §10): pure functions over field definitions and data.

Given an entry's field values, list every media reference it holds, with emdash's field paths,
id rules, provider and mime normalisation, and de-duplication. Odd data that can be read whole
is simply not an occurrence; a value that cannot be read whole (nested past ``MAX_JSON_DEPTH``,
text that claims to be JSON and is not) raises ``UnreadableValue``, so the entry fails instead of
counting as "no reference" (docs/design.md, "Fail closed").
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.errors import EntryTooLarge, FieldDiscoveryError, UnreadableValue
from media_usage_worker.domain.reference_paths import (
    ReferencePath,
    embedded_media_keys,
    media_file_key,
    parse_reference_path,
)
from media_usage_worker.domain.validation import storable

_URL_LIKE = re.compile(r"^(?:[a-z][a-z0-9+.\-]*:|//)", re.IGNORECASE)
_MEDIA_FILE_PATH = "/_emdash/api/media/file/"
_DOCUMENT_MIMES = frozenset(
    {
        "application/pdf",
        "application/msword",
        "application/rtf",
        "application/vnd.ms-excel",
        "application/vnd.ms-powerpoint",
    }
)
_ARCHIVE_MIMES = frozenset(
    {
        "application/zip",
        "application/gzip",
        "application/x-tar",
        "application/x-7z-compressed",
        "application/x-rar-compressed",
        "application/vnd.rar",
    }
)


@dataclass(frozen=True)
class ExtractionField:
    """A field that can hold media: image, file, portableText, a repeater's image sub-fields,
    or any field with declared reference paths."""

    slug: str
    type: str
    image_sub_fields: tuple[str, ...] = ()
    declared_paths: tuple[ReferencePath, ...] = ()

    def schema(self) -> dict[str, Any]:
        """The field's entry in a projection fingerprint's ``extractionSchema``."""
        entry: dict[str, Any] = {"slug": self.slug, "type": self.type}
        if self.type == "repeater":
            entry["subFields"] = [{"slug": s, "type": "image"} for s in self.image_sub_fields]
        if self.declared_paths:
            entry["declaredPaths"] = [p.text for p in self.declared_paths]
        return entry


def _no_media(_storage_key: str) -> str | None:
    return None


# What a declared reference path finds (emdash's own read side shows it as "unknown").
DECLARED_PATH = "declared_path"


@dataclass(frozen=True)
class MediaUrls:
    """How the URL of a media file becomes its media id: the site's media URL prefixes and a
    lookup of a storage key (``None``: no media item has it, and the URL is no reference)."""

    prefixes: tuple[str, ...] = ()
    media_id_for_key: Callable[[str], str | None] = _no_media

    def media_id(self, value: str) -> str | None:
        key = media_file_key(value, self.prefixes)
        return None if key is None else self.media_id_for_key(key)

    def media_ids_in_text(self, text: str) -> list[str]:
        """The media items whose file URLs appear anywhere inside ``text``."""
        found: dict[str, None] = {}
        for key in embedded_media_keys(text, self.prefixes):
            media_id = self.media_id_for_key(key)
            if media_id is not None:
                found.setdefault(media_id)
        return list(found)


NO_MEDIA_URLS = MediaUrls()


@dataclass(frozen=True)
class Occurrence:
    field_slug: str
    field_path: str
    reference_type: str
    media_id: str | None
    provider: str
    provider_asset_id: str
    media_kind: str | None
    mime_type: str | None
    occurrence_index: int = 0

    def payload(self) -> dict[str, Any]:
        """Camel-case form used by projection fingerprints."""
        return {
            "fieldSlug": self.field_slug,
            "fieldPath": self.field_path,
            "occurrenceIndex": self.occurrence_index,
            "referenceType": self.reference_type,
            "mediaId": self.media_id,
            "provider": self.provider,
            "providerAssetId": self.provider_asset_id,
            "mediaKind": self.media_kind,
            "mimeType": self.mime_type,
        }


def extraction_fields(fields: Iterable[FieldDefinition]) -> list[ExtractionField]:
    """The fields extraction looks at, sorted by slug: every field that can hold text (its
    strings are searched for media file URLs) or media."""
    result = []
    for definition in fields:
        declared = tuple(_declared_path(p) for p in sorted(definition.reference_paths))
        subs = _image_sub_fields(definition) if definition.type == "repeater" else ()
        if definition.type not in _NO_TEXT_FIELD_TYPES or subs or declared:
            result.append(ExtractionField(definition.slug, definition.type, subs, declared))
    return sorted(result, key=lambda f: f.slug)


# Field types whose values hold no text, so no media URL: not read at all.
_NO_TEXT_FIELD_TYPES = frozenset({"number", "integer", "boolean", "datetime"})
# Field types whose text is JSON (or an image or file value, which may be a JSON object):
# parsed before extraction. Any other field's text is searched as it is.
STRUCTURED_FIELD_TYPES = frozenset(
    {"image", "file", "portableText", "repeater", "json", "multiSelect", "sourceJson"}
)


# Field types that can hold media whatever their settings: a collection's, and the columns of
# a source beyond content (``domain.host_sources``).
_MEDIA_FIELD_TYPES = frozenset(
    {"image", "file", "portableText", "sourceMediaId", "sourceJson", "sourceUrl"}
)


# Every refresh lists its fields' declared paths; each distinct path is parsed once.
# Sized for many collections at their limit of declared paths: a cache smaller than the paths
# in use would parse every path again on every refresh.
_declared_path = functools.lru_cache(maxsize=16_384)(parse_reference_path)


def _image_sub_fields(definition: FieldDefinition) -> tuple[str, ...]:
    validation = definition.validation
    if definition.validation_unreadable or (
        validation is not None and not isinstance(validation, Mapping)
    ):
        raise FieldDiscoveryError(f"Repeater {definition.slug!r} has invalid validation JSON.")
    if validation is None:
        return ()
    sub_fields = validation.get("subFields")
    if not isinstance(sub_fields, list):
        return ()
    slugs = {
        sub["slug"]
        for sub in sub_fields
        if isinstance(sub, Mapping)
        and sub.get("type") == "image"
        and isinstance(sub.get("slug"), str)
    }
    return tuple(sorted(slugs))


def normalize_provider(value: object) -> str | None:
    """Trimmed provider, ``local`` when absent; ``None`` when it cannot be stored."""
    if not isinstance(value, str):
        return "local"
    if not storable(value):
        return None
    return value.strip() or "local"


def stable_id(value: object) -> str | None:
    if not isinstance(value, str) or not storable(value):
        return None
    trimmed = value.strip()
    if not trimmed or _URL_LIKE.match(trimmed) or trimmed.startswith(_MEDIA_FILE_PATH):
        return None
    return trimmed


def local_id(value: object) -> str | None:
    candidate = stable_id(value)
    return candidate if candidate is not None and "/" not in candidate else None


def normalize_mime(value: object) -> str | None:
    if not isinstance(value, str) or not storable(value):
        return None
    mime = value.split(";", 1)[0].strip().lower()
    return mime if "/" in mime else None


def media_kind(mime: str | None, fallback: str | None) -> str | None:
    if mime is None:
        return fallback
    major = mime.split("/", 1)[0]
    if major in ("image", "video", "audio", "text"):
        return major
    if major == "font" or mime.startswith("application/font-"):
        return "font"
    if mime in _DOCUMENT_MIMES or mime.startswith("application/vnd.openxmlformats-officedocument."):
        return "document"
    if mime in _ARCHIVE_MIMES:
        return "archive"
    return "other"


# Bytes (UTF-8) an indexed value may take. PostgreSQL refuses a B-tree entry over about 2.7 KB
# (``index row size exceeds btree maximum``), and these values share index entries with the
# source key; past these lengths a value is no media reference but a host's bug, and is not
# an occurrence, so no write can hit that limit. A library id is a 26-character ULID.
MAX_ID_BYTES = 512
MAX_PROVIDER_BYTES = 64
MAX_FIELD_PATH_BYTES = 1024


def _indexable(asset_id: str, provider: str, field_path: str) -> bool:
    return (
        len(asset_id.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES
        and len(provider.encode("utf-8", "surrogatepass")) <= MAX_PROVIDER_BYTES
        and len(field_path.encode("utf-8", "surrogatepass")) <= MAX_FIELD_PATH_BYTES
    )


# How deep a media-bearing value may nest. Real content nests a few levels (Portable Text
# blocks, a gallery's images, a settings object); past this bound a value is not read, and the
# entry fails (``UnreadableValue``) rather than being indexed without what the depth hides.
MAX_JSON_DEPTH = 200


def read_json_text(value: str, *, plain_text_allowed: bool = False) -> object:
    """Parse text that claims to be JSON; ``UnreadableValue`` when it nests past the parser's
    own depth (Python's recursion limit), or is not JSON (unless ``plain_text_allowed``: then
    the text itself is the value)."""
    try:
        return json.loads(value)
    except RecursionError:
        raise UnreadableValue("JSON nested past the parser's depth") from None
    except ValueError:
        if plain_text_allowed:
            return value
        raise UnreadableValue("text that starts like JSON is not valid JSON") from None


def check_depth(value: object, where: str) -> None:
    """``UnreadableValue`` when ``value`` nests deeper than ``MAX_JSON_DEPTH`` (walked with an
    explicit stack: no recursion, whatever the depth)."""
    if not isinstance(value, Mapping | list):
        return
    stack: list[tuple[Mapping[str, Any] | list[Any], int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise UnreadableValue(f"{where} nests deeper than {MAX_JSON_DEPTH} levels")
        children = node.values() if isinstance(node, Mapping) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, Mapping | list))


def _is_plain_object(value: object) -> TypeGuard[Mapping[str, Any]]:
    return isinstance(value, Mapping)


def _reference(
    field_slug: str,
    field_path: str,
    reference_type: str,
    provider_value: object,
    id_value: object,
    mime_value: object,
    fallback_kind: str | None,
    urls: MediaUrls | None = None,
) -> Occurrence | None:
    provider = normalize_provider(provider_value)
    if provider is None or provider == "external":
        return None
    asset_id = local_id(id_value) if provider == "local" else stable_id(id_value)
    if asset_id is None and provider == "local" and urls is not None and isinstance(id_value, str):
        # The URL of a file in the media library names that media item; any other URL, none.
        asset_id = urls.media_id(id_value)
    if asset_id is None or not _indexable(asset_id, provider, field_path):
        return None
    mime = normalize_mime(mime_value)
    return Occurrence(
        field_slug=field_slug,
        field_path=field_path,
        reference_type=reference_type,
        media_id=asset_id if provider == "local" else None,
        provider=provider,
        provider_asset_id=asset_id,
        media_kind=media_kind(mime, fallback_kind),
        mime_type=mime,
    )


def _value_reference(
    field_slug: str,
    field_path: str,
    reference_type: str,
    value: object,
    fallback: str | None,
    urls: MediaUrls,
) -> Occurrence | None:
    """An image or file field's value (or what a declared path reaches): an id, a media URL,
    or an object with ``id``, ``provider`` and ``mimeType``."""
    if isinstance(value, str):
        return _reference(field_slug, field_path, reference_type, None, value, None, fallback, urls)
    if _is_plain_object(value):
        return _reference(
            field_slug,
            field_path,
            reference_type,
            value.get("provider"),
            value.get("id"),
            value.get("mimeType"),
            fallback,
            urls,
        )
    return None


def _field_occurrences(
    field: ExtractionField, value: object, urls: MediaUrls
) -> Iterable[Occurrence | None]:
    if field.type == "image":
        yield _value_reference(field.slug, field.slug, "image_field", value, "image", urls)
    elif field.type == "file":
        yield _value_reference(field.slug, field.slug, "file_field", value, None, urls)
    elif field.type == "repeater" and isinstance(value, list):
        for index, item in enumerate(value):
            if not _is_plain_object(item):
                continue
            for sub in field.image_sub_fields:
                path = f"{field.slug}[{index}].{sub}"
                yield _value_reference(
                    field.slug, path, "image_field", item.get(sub), "image", urls
                )
    elif field.type == "portableText" and isinstance(value, list):
        for index, block in enumerate(value):
            if not _is_plain_object(block):
                continue
            if block.get("_type") == "image":
                yield _asset_occurrence(field.slug, f"{field.slug}[{index}]", block.get("asset"))
            elif block.get("_type") == "gallery" and isinstance(block.get("images"), list):
                # A core gallery block: each image counts as an image block would (emdash
                # 0.34 skipped them, so a gallery's images read as "used nowhere").
                for position, image in enumerate(block["images"]):
                    if _is_plain_object(image):
                        path = f"{field.slug}[{index}].images[{position}]"
                        yield _asset_occurrence(field.slug, path, image.get("asset"))
    elif field.type == "sourceMediaId":
        yield _value_reference(field.slug, field.slug, "column_media_id", value, None, urls)
    elif field.type == "sourceUrl":
        yield _url_reference(field.slug, field.slug, value, urls)
    elif field.type == "sourceJson":
        yield from _json_references(field.slug, value, urls)
    for declared in field.declared_paths:
        for path, reached in declared.walk(value):
            yield _value_reference(field.slug, path, DECLARED_PATH, reached, None, urls)


def _url_reference(field_slug: str, path: str, value: object, urls: MediaUrls) -> Occurrence | None:
    """A media file's URL (only a URL: a bare word in a URL column is no reference)."""
    if not isinstance(value, str):
        return None
    media_id = urls.media_id(value.strip())
    if media_id is None:
        return None
    return _reference(field_slug, path, "media_url", None, media_id, None, None)


# The keys by which a JSON value names a media item: emdash's media reference
# (``{"mediaId": ...}``, site settings) and an image field's value (``{"id": ...}`` beside
# one of the keys only a media value has).
_MEDIA_VALUE_KEYS = ("provider", "mimeType", "src", "storageKey")


def _json_references(
    field_slug: str, value: object, urls: MediaUrls
) -> Iterable[Occurrence | None]:
    """Every media reference anywhere in a JSON value (``extract`` parsed it, and checked its
    depth): media references, image values and media file URLs, at any depth (walked without
    recursion). Text that is not JSON is searched as one string."""
    stack: list[tuple[str, object]] = [(field_slug, value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            yield _url_reference(field_slug, path, node, urls)
        elif _is_plain_object(node):
            found: Occurrence | None = None
            if isinstance(node.get("mediaId"), str):
                found = _reference(
                    field_slug, f"{path}.mediaId", "media_reference", node.get("provider"),
                    node["mediaId"], node.get("mimeType"), None, urls,
                )  # fmt: skip
            elif "id" in node and any(k in node for k in _MEDIA_VALUE_KEYS):
                found = _value_reference(field_slug, path, "media_value", node, None, urls)
            yield found
            # A media value's own strings (its ``src``) name the same item: not again.
            children = [(k, v) for k, v in node.items() if found is None or not isinstance(v, str)]
            stack.extend((f"{path}.{k}", v) for k, v in reversed(children))
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(node))))


TEXT_URL = "text_url"


def _text_urls(
    field_slug: str, value: object, urls: MediaUrls, named: set[str | None]
) -> list[Occurrence]:
    """A use for each media file URL written inside any string of ``value`` (HTML, Markdown,
    a link annotation's ``href``, prose), at the string's path; an item the field's own
    extraction already found is not added again. Walked with an explicit stack."""
    found: list[Occurrence] = []
    stack: list[tuple[str, object]] = [(field_slug, value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            # Numbered from 1 within the string: a string may name several items, and index 0
            # stays the field's own extraction's at the same path.
            fresh = [i for i in urls.media_ids_in_text(node) if i not in named]
            for position, media_id in enumerate(fresh, start=1):
                named.add(media_id)
                use = _reference(field_slug, path, TEXT_URL, None, media_id, None, None)
                if use is not None:
                    found.append(dataclasses.replace(use, occurrence_index=position))
        elif _is_plain_object(node):
            stack.extend((f"{path}.{k}", v) for k, v in reversed(list(node.items())))
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(node))))
    return found


def _asset_occurrence(field_slug: str, path: str, asset: object) -> Occurrence | None:
    """A Portable Text image's ``asset`` at ``path``: ``_ref`` when it is a valid id, else
    ``id`` (the path records which key was used)."""
    if not _is_plain_object(asset):
        return None
    provider = normalize_provider(asset.get("provider"))
    id_rule = local_id if provider == "local" else stable_id
    key = "_ref" if id_rule(asset.get("_ref")) is not None else "id"
    return _reference(
        field_slug,
        f"{path}.asset.{key}",
        "portable_text_image",
        asset.get("provider"),
        asset.get(key),
        asset.get("mimeType"),
        "image",
    )


def extract(
    fields: Sequence[ExtractionField],
    data: Mapping[str, Any],
    max_occurrences: int | None = None,
    urls: MediaUrls | None = None,
) -> list[Occurrence]:
    """Every media occurrence in ``data``, in field then item order, de-duplicated.

    ``urls`` resolves media file URLs (none resolve without it). ``UnreadableValue`` when a
    field's value nests past ``MAX_JSON_DEPTH``. Stops with ``EntryTooLarge``
    as soon as there are more than ``max_occurrences``, so an entry of a million images costs
    a bounded list, not a million objects.
    """
    seen: set[tuple[str, str, int, str, str, str, str]] = set()
    result = []
    for field in fields:
        value = data.get(field.slug)
        if field.type == "sourceJson" and isinstance(value, str):
            # The one parse of a source's JSON column: any JSON value, or else plain text.
            value = read_json_text(value, plain_text_allowed=True)
        check_depth(value, field.slug)
        found = [o for o in _field_occurrences(field, value, urls or NO_MEDIA_URLS) if o]
        named = {o.media_id for o in found}
        found += _text_urls(field.slug, value, urls or NO_MEDIA_URLS, named)
        for occurrence in found:
            key = (
                occurrence.field_slug,
                occurrence.field_path,
                occurrence.occurrence_index,
                occurrence.reference_type,
                occurrence.provider,
                occurrence.provider_asset_id,
                occurrence.media_id or "",
            )
            if key not in seen:
                seen.add(key)
                result.append(occurrence)
                if max_occurrences is not None and len(result) > max_occurrences:
                    raise EntryTooLarge(f"more than {max_occurrences} media occurrences")
    return result
