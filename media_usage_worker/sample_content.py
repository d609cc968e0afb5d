"""Writes sample entries the way a host application would: plain inserts, captured by triggers."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.host_sources import ColumnKind, HostSource, SourceKind
from media_usage_worker.domain.reference_paths import parse_reference_path
from media_usage_worker.domain.sample_content import (
    COLLECTIONS,
    DECLARED_PATHS,
    SAMPLE_BYLINES,
    SAMPLE_MENU,
    SAMPLE_MENU_TABLE,
    SAMPLE_SETTINGS,
    SAMPLE_USERS,
    SampleEntry,
    media_library,
)
from media_usage_worker.pipeline.registry import declare_reference_path
from media_usage_worker.repository.base.db import Bind, transaction
from media_usage_worker.repository.base.schema import bylines, media, options, revisions, users
from media_usage_worker.repository.registry import collections, host_sources
from media_usage_worker.repository.registry.content_tables import content_columns


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


_menu = sa.Table(
    SAMPLE_MENU_TABLE,
    sa.MetaData(),
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("items", sa.Text),
    sa.Column("link", sa.Text),
)


def create_sample_site(engine: sa.Engine) -> HostSource | None:
    """The sample site beyond its collections, as its host would write it: settings with a
    favicon, a logo and a default social image, a user and a byline with avatars, and a menu
    table. Rows that exist already are left as they are. The menu table as a source to declare
    (``pipeline.capture.declare_source``), or None once it is declared."""
    _menu.create(engine, checkfirst=True)
    with transaction(engine) as conn:
        _insert_missing(
            conn,
            options,
            "name",
            [{"name": k, "value": json.dumps(v)} for k, v in SAMPLE_SETTINGS.items()],
        )
        _insert_missing(
            conn,
            users,
            "id",
            [{"id": i, "email": e, "name": n, "avatar_id": a} for i, e, n, a in SAMPLE_USERS],
        )
        _insert_missing(
            conn,
            bylines,
            "id",
            [
                {"id": i, "slug": s, "display_name": n, "avatar_media_id": a}
                for i, s, n, a in SAMPLE_BYLINES
            ],
        )
        _insert_missing(conn, _menu, "id", [
            {"id": i, "items": json.dumps(items), "link": link} for i, items, link in SAMPLE_MENU
        ])  # fmt: skip
        declared = SAMPLE_MENU_TABLE in {s.table for s in host_sources.list_sources(conn)}
    if declared:
        return None
    columns = (("items", ColumnKind.JSON), ("link", ColumnKind.URL))
    return HostSource(SourceKind.TABLE, SAMPLE_MENU_TABLE, "id", columns)


def _insert_missing(
    conn: sa.Connection, table: sa.Table, key: str, rows: list[dict[str, Any]]
) -> None:
    present = set(conn.execute(sa.select(table.c[key])).scalars())
    missing = [row for row in rows if row[key] not in present]
    if missing:
        conn.execute(table.insert(), missing)
