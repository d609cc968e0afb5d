"""Projection fingerprints (docs/design.md §10): canonical JSON, SHA-256, fixed prefix.

Two projections with the same fingerprint index the same things, so an unchanged entry is a
no-op that keeps its generation.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Sequence
from typing import Any

from media_usage_worker.domain.extraction import ExtractionField, Occurrence

PROJECTION_PREFIX = "media-usage-projection:v1:sha256:"
PROJECTION_PATTERN = re.compile(r"media-usage-projection:v1:sha256:[0-9a-f]{64}")
SOURCE_PAYLOAD_KEYS = (
    "sourceKey",
    "sourceType",
    "collectionSlug",
    "contentId",
    "sourceVariant",
    "locale",
    "translationGroup",
    "contentSlug",
    "contentTitle",
    "contentStatus",
    "contentScheduledAt",
    "contentDeletedAt",
    "revisionId",
)


def _normalise(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, non-ASCII kept (JSON.stringify of a key-sorted value)."""
    return json.dumps(_normalise(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# The projection payload holds only text, integers and nulls under literal keys: this encoder
# gives the same text as ``canonical_json`` for it without walking it first.
_encode = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode


def _payload_json(value: Any) -> str:
    try:
        return _encode(value)
    except ValueError:  # a non-finite float in stored content: canonical_json writes null
        return canonical_json(value)


@functools.lru_cache(maxsize=1024)
def _schema_json(fields: tuple[ExtractionField, ...]) -> str:
    return canonical_json([f.schema() for f in sorted(fields, key=lambda f: f.slug)])


def projection(
    collection_id: str,
    fields: Sequence[ExtractionField],
    source: dict[str, Any],
    occurrences: Sequence[Occurrence],
) -> tuple[str, int]:
    """The projection's fingerprint and its canonical byte length.

    The text is ``canonical_json`` of ``{"fingerprintVersion": 1, "collectionId",
    "extractionSchema", "source", "occurrences"}`` with the occurrences sorted by their own
    canonical text; it is put together from those parts (keys in sorted order), each encoded
    once, and the fields' part is encoded once per set of fields.
    """
    if not collection_id:
        raise ValueError("A projection fingerprint requires a collection id.")
    fingerprint_source = {
        **{key: source.get(key) for key in SOURCE_PAYLOAD_KEYS},
        "schemaVersion": source.get("schemaVersion", 1),
        "sourceCompleteness": source.get("sourceCompleteness", "complete"),
    }
    occurrence_texts = sorted(_payload_json(o.payload()) for o in occurrences)
    text = (
        '{"collectionId":' + _payload_json(collection_id)
        + ',"extractionSchema":' + _schema_json(tuple(fields))
        + ',"fingerprintVersion":1,"occurrences":[' + ",".join(occurrence_texts)
        + '],"source":' + _payload_json(fingerprint_source) + "}"
    ).encode("utf-8")  # fmt: skip
    return PROJECTION_PREFIX + hashlib.sha256(text).hexdigest(), len(text)
