"""Content snapshots (docs/design.md §10): what one entry's sources should look like right now.

Pure: the repository loads the content row (and draft revision) and hands them over; this module
decides the ``columns`` and ``draft_overlay`` projections, their metadata and fingerprints.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from media_usage_worker.domain import fingerprint
from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.errors import EntryTooLarge
from media_usage_worker.domain.extraction import (
    STRUCTURED_FIELD_TYPES,
    ExtractionField,
    MediaUrls,
    Occurrence,
    extract,
    extraction_fields,
    read_json_text,
)
from media_usage_worker.domain.policy import Limits
from media_usage_worker.domain.rules import EXTRACTION_VERSION
from media_usage_worker.domain.vocabulary import RefreshCode

SOURCE_TYPE = "content"
VARIANTS = ("columns", "draft_overlay")
DISPLAY_FIELDS = ("title", "name")
SCHEMA_VERSION = 1
IDENTITY_VERSION = 1


def source_key(collection_id: str, content_id: str, variant: str) -> str:
    """Canonical, identity-bound key: ``content:<collection_id>:<content_id>:<variant>``."""
    return f"content:{collection_id}:{content_id}:{variant}"


@dataclass(frozen=True)
class ContentEntry:
    """One entry, named by its collection's identity (id and slug) and its content id."""

    collection_id: str
    collection_slug: str
    content_id: str


@dataclass(frozen=True)
class Revision:
    collection: str
    entry_id: str
    data: str | Mapping[str, Any]


@dataclass(frozen=True)
class Snapshot:
    variant: str
    source: dict[str, Any]  # column name -> value, as written to the sources table
    occurrences: list[Occurrence]
    fingerprint: str
    byte_length: int


@dataclass(frozen=True)
class SnapshotSet:
    columns: Snapshot
    draft: Snapshot | None = None
    draft_error: RefreshCode | None = None
    snapshots: list[Snapshot] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.snapshots.extend(s for s in (self.columns, self.draft) if s is not None)


def _text(value: object) -> str | None:
    """Text slots take strings only, made storable: NUL dropped, lone surrogates replaced."""
    if not isinstance(value, str):
        return None
    return value.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def parse_column(value: object, *, plain_text_allowed: bool = False) -> object:
    """Object and array strings are JSON-parsed. Text that starts like JSON and is not (unless
    ``plain_text_allowed``: then it stays text), or nests past the parser's depth, cannot be
    read whole: ``UnreadableValue``, and the entry fails (a field read as "no reference" could
    let a used file go)."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        return read_json_text(value, plain_text_allowed=plain_text_allowed)
    return value


def _column_value(field: ExtractionField, value: object) -> object:
    # A field of a structured type is parsed (its text must be JSON, or it is unreadable); a
    # text field with declared paths may also hold plain text, read whole as one string. A
    # source's JSON column is parsed by ``extract`` (any JSON value, or plain text), and any
    # other field's text is searched as it is.
    if field.type in STRUCTURED_FIELD_TYPES and field.type != "sourceJson":
        return parse_column(value)
    if field.declared_paths and field.type != "sourceJson":
        return parse_column(value, plain_text_allowed=True)
    return value


def _title(display: Mapping[str, Any], content_slug: str | None, content_id: str) -> str:
    for name in DISPLAY_FIELDS:
        value = _text(display.get(name))
        if value and value.strip():
            return value
    return content_slug or content_id


def build_snapshots(
    *,
    collection_id: str,
    collection_slug: str,
    fields: Sequence[ExtractionField],
    row: Mapping[str, Any],
    display_fields: Sequence[str],
    revision: Revision | None,
    limits: Limits | None = None,
    media_urls: MediaUrls | None = None,
) -> SnapshotSet:
    """Both variants of one entry from its live row and, if it has one, its draft revision.

    With ``limits``, an entry too large to index raises ``EntryTooLarge`` before its text is
    parsed (``max_entry_chars``) or as soon as it has too many occurrences; without, the whole
    entry is extracted (the test oracle's from-scratch extraction). ``media_urls`` resolves
    media file URLs (without, none is a reference).
    """
    content_id = row["id"]
    if limits is not None:
        _check_entry_size(fields, row, revision, limits.max_entry_chars)
    max_occurrences = None if limits is None else limits.max_occurrences
    columns_data = {f.slug: _column_value(f, row.get(f.slug)) for f in fields}
    display = {name: row.get(name) for name in display_fields}
    base = {
        "source_type": SOURCE_TYPE,
        "collection_id": collection_id,
        "collection_slug": collection_slug,
        "content_id": content_id,
        "locale": _text(row.get("locale")),
        "translation_group": _text(row.get("translation_group")),
        "content_status": _text(row.get("status")),
        "content_scheduled_at": _text(row.get("scheduled_at")),
        "content_deleted_at": _text(row.get("deleted_at")),
        "schema_version": SCHEMA_VERSION,
        "source_updated_at": _text(row.get("updated_at")),
        "source_version": _version(row.get("version")),
        "identity_version": IDENTITY_VERSION,
        "source_completeness": "complete",
    }
    content_slug = _text(row.get("slug"))
    columns = _snapshot(
        collection_id, fields, "columns", columns_data, max_occurrences, media_urls,
        {**base, "content_slug": content_slug,
         "content_title": _title(display, content_slug, content_id),
         "revision_id": _text(row.get("live_revision_id"))},
    )  # fmt: skip
    draft_id = _text(row.get("draft_revision_id"))
    if draft_id is None:
        return SnapshotSet(columns=columns)
    problem, data = _draft_data(revision, collection_slug, content_id)
    if problem is not None:
        return SnapshotSet(columns=columns, draft_error=problem)
    overlay = {**columns_data, **{k: v for k, v in data.items() if not k.startswith("_")}}
    draft_slug = _text(data["_slug"]) if isinstance(data.get("_slug"), str) else content_slug
    draft_display = {
        name: data[name] if name in data else display.get(name) for name in display_fields
    }
    draft = _snapshot(
        collection_id, fields, "draft_overlay", overlay, max_occurrences, media_urls,
        {**base, "content_slug": draft_slug,
         "content_title": _title(draft_display, draft_slug, content_id),
         "revision_id": draft_id},
    )  # fmt: skip
    return SnapshotSet(columns=columns, draft=draft)


def _check_entry_size(
    fields: Sequence[ExtractionField],
    row: Mapping[str, Any],
    revision: Revision | None,
    max_chars: int,
) -> None:
    """Refuse an entry whose media-bearing text (live and draft) is over ``max_chars``."""
    size = sum(len(v) for f in fields if isinstance(v := row.get(f.slug), str))
    if revision is not None and isinstance(revision.data, str):
        size += len(revision.data)
    if size > max_chars:
        raise EntryTooLarge(f"{size} characters of media fields, over {max_chars}")


def _version(value: object) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return int(value)
    return None


def _draft_data(
    revision: Revision | None, collection_slug: str, content_id: str
) -> tuple[RefreshCode | None, dict[str, Any]]:
    if revision is None:
        return RefreshCode.DRAFT_REVISION_NOT_FOUND, {}
    data = revision.data
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except (ValueError, RecursionError):
            return RefreshCode.DRAFT_REVISION_INVALID, {}
    if not isinstance(data, dict):
        return RefreshCode.DRAFT_REVISION_INVALID, {}
    if revision.collection != collection_slug or revision.entry_id != content_id:
        return RefreshCode.DRAFT_REVISION_MISMATCH, {}
    return None, data


def _snapshot(
    collection_id: str,
    fields: Sequence[ExtractionField],
    variant: str,
    data: Mapping[str, Any],
    max_occurrences: int | None,
    media_urls: MediaUrls | None,
    source: dict[str, Any],
) -> Snapshot:
    key = source_key(collection_id, source["content_id"], variant)
    source = {**source, "source_key": key, "source_variant": variant}
    occurrences = extract(fields, data, max_occurrences, media_urls)
    print_, length = fingerprint.projection(
        collection_id, fields, _fingerprint_source(source), occurrences
    )
    source["source_fingerprint"] = print_
    return Snapshot(variant, source, occurrences, print_, length)


def _fingerprint_source(source: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "sourceKey": source["source_key"],
        "sourceType": source["source_type"],
        "collectionSlug": source["collection_slug"],
        "contentId": source["content_id"],
        "sourceVariant": source["source_variant"],
        "locale": source["locale"],
        "translationGroup": source["translation_group"],
        "contentSlug": source["content_slug"],
        "contentTitle": source["content_title"],
        "contentStatus": source["content_status"],
        "contentScheduledAt": source["content_scheduled_at"],
        "contentDeletedAt": source["content_deleted_at"],
        "revisionId": source["revision_id"],
        "schemaVersion": source["schema_version"],
        "sourceCompleteness": source["source_completeness"],
    }


FIELD_FINGERPRINT_PREFIX = "media-usage-fields:v1:sha256:"


def field_fingerprint(fields: Sequence[FieldDefinition]) -> str:
    """What a reconciliation run indexes with: a field change (or a worker of another
    extraction version taking a step of the run) restarts the run."""
    payload = {
        "fingerprintVersion": 1,
        "contentSourceSchemaVersion": 1,
        # Other extraction code indexes differently: a run it started is restarted here.
        "extractionVersion": EXTRACTION_VERSION,
        "extractionFields": [f.schema() for f in extraction_fields(fields)],
        "displayFieldSlugs": sorted(n for n in DISPLAY_FIELDS if any(f.slug == n for f in fields)),
    }
    digest = hashlib.sha256(fingerprint.canonical_json(payload).encode()).hexdigest()
    return FIELD_FINGERPRINT_PREFIX + digest


# A run that hands out key ranges (docs/design.md §6, "Ranges") records its fields'
# fingerprint behind this mark. A worker from before ranges then reads another fingerprint and
# restarts the run its own way, instead of finishing it while ranges it knows nothing of are
# still unprocessed.
RANGED_RUN_MARK = "ranged:"


def run_fingerprint(fields: Sequence[FieldDefinition]) -> str:
    """What a reconciliation run records as its fingerprint: its fields', marked as ranged."""
    return RANGED_RUN_MARK + field_fingerprint(fields)


def fields_of_run(run: str | None) -> str | None:
    """The fields' fingerprint inside a run's (what the index was computed with)."""
    return None if run is None else run.removeprefix(RANGED_RUN_MARK)
