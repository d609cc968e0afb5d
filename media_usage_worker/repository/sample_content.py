"""Writes sample entries the way a host application would: plain inserts, captured by triggers."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.reference_paths import parse_reference_path
from media_usage_worker.domain.sample_content import (
    COLLECTIONS,
    DECLARED_PATHS,
    SampleEntry,
    media_library,
)
from media_usage_worker.repository import collections
from media_usage_worker.repository.content_tables import content_columns
from media_usage_worker.repository.db import Bind, transaction
from media_usage_worker.repository.rules import declare_reference_path
from media_usage_worker.repository.schema import media, revisions


def create_sample_collections(bind: sa.Engine) -> list[str]:
    """Register the sample collections, their declared reference paths and the media library
    items their entries reference, those that do not exist yet; returns every sample slug."""
    existing = {c.slug for c in collections.list_collections(bind)}
    for slug, fields in COLLECTIONS.items():
        if slug not in existing:
            collections.create_collection(bind, slug, slug.title(), fields)
        for path in DECLARED_PATHS.get(slug, ()):
            declare_reference_path(bind, slug, parse_reference_path(path))
    with transaction(bind) as conn:
        present = set(conn.execute(sa.select(media.c.id)).scalars())
        missing = [row for row in media_library() if row["id"] not in present]
        if missing:
            conn.execute(media.insert(), missing)
    return sorted(COLLECTIONS)


def write_entries(bind: Bind, entries: Iterable[SampleEntry]) -> int:
    """Insert the entries (and their draft revisions) in one transaction; returns the count."""
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    drafts: list[dict[str, Any]] = []
    for entry in entries:
        row = dict(entry.row)
        row["draft_revision_id"] = None
        if entry.draft is not None:
            row["draft_revision_id"] = f"rev-{entry.row['id']}"
            drafts.append(
                {
                    "id": row["draft_revision_id"],
                    "collection": entry.collection,
                    "entry_id": entry.row["id"],
                    "data": json.dumps(entry.draft),
                }
            )
        rows[entry.collection].append(row)
    with transaction(bind) as conn:
        if drafts:
            conn.execute(revisions.insert(), drafts)
        for slug, values in rows.items():
            conn.execute(content_columns(slug, list(values[0])).insert(), values)
    return sum(len(v) for v in rows.values())
