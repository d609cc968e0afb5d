"""Projection fingerprints (docs/design.md §10): canonical JSON, SHA-256, fixed prefix.

Two projections with the same fingerprint index the same things, so an unchanged entry is a
no-op that keeps its generation.
"""

from __future__ import annotations

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


def projection(
    collection_id: str,
    fields: Sequence[ExtractionField],
    source: dict[str, Any],
    occurrences: Sequence[Occurrence],
) -> tuple[str, int]:
    """The projection's fingerprint and its canonical byte length."""
    if not collection_id:
        raise ValueError("A projection fingerprint requires a collection id.")
    payload = {
        "fingerprintVersion": 1,
        "collectionId": collection_id,
        "extractionSchema": [f.schema() for f in sorted(fields, key=lambda f: f.slug)],
        "source": {
            **{key: source.get(key) for key in SOURCE_PAYLOAD_KEYS},
            "schemaVersion": source.get("schemaVersion", 1),
            "sourceCompleteness": source.get("sourceCompleteness", "complete"),
        },
        "occurrences": sorted((o.payload() for o in occurrences), key=lambda p: canonical_json(p)),
    }
    text = canonical_json(payload).encode("utf-8")
    return PROJECTION_PREFIX + hashlib.sha256(text).hexdigest(), len(text)
