"""A from-scratch extraction of every entry, to compare the maintained index against.

It reuses the pure rules (``domain``) but none of the incremental machinery: no work rows, no
generations, no compare-and-sets. If the pipeline lost, duplicated or misplaced a write, the
two sides differ.
"""

from __future__ import annotations

import json

import sqlalchemy as sa

from media_usage_worker.domain.extraction import MediaUrls, extraction_fields
from media_usage_worker.domain.snapshots import DISPLAY_FIELDS, Revision, build_snapshots
from media_usage_worker.domain.validation import is_usable_identifier
from media_usage_worker.repository.registry.collections import CollectionRegistry
from media_usage_worker.repository.registry.host_sources import list_sources

Row = tuple[str, str, str, str | None, str, str, str | None, str | None]


def _row(key: str, o) -> Row:
    return (key, o.field_path, o.reference_type, o.media_id, o.provider, o.provider_asset_id,
            o.media_kind, o.mime_type)  # fmt: skip


def expected_index(engine: sa.Engine) -> set[Row]:
    registry = CollectionRegistry(engine)
    # Read the registry first: on SQLite a second connection would wait on this one's lock.
    collections = [(c, registry.fields(c.id)) for c in registry.list()]
    expected: set[Row] = set()
    with engine.connect() as conn:
        urls = _media_urls(conn)
        for collection, fields in collections:
            extraction = extraction_fields(fields)
            display = [n for n in DISPLAY_FIELDS if any(f.slug == n for f in fields)]
            rows = conn.execute(sa.text(f"SELECT * FROM ec_{collection.slug}")).mappings().all()
            for row in rows:
                if not is_usable_identifier(row["id"]):
                    continue  # never indexed: its work fails as MEDIA_USAGE_UNUSABLE_CONTENT_ID
                revision = None
                if row["draft_revision_id"]:
                    found = conn.execute(
                        sa.text("SELECT collection, entry_id, data FROM revisions WHERE id = :id"),
                        {"id": row["draft_revision_id"]},
                    ).first()
                    revision = Revision(*found) if found else None
                values = {
                    k: (json.dumps(v) if isinstance(v, dict | list) else v) for k, v in row.items()
                }
                snapshots = build_snapshots(
                    collection_id=collection.id, collection_slug=collection.slug,
                    fields=extraction, row=values, display_fields=display, revision=revision,
                    media_urls=urls,
                )  # fmt: skip
                for snapshot in snapshots.snapshots:
                    key = snapshot.source["source_key"]
                    expected.update(_row(key, o) for o in snapshot.occurrences)
        expected |= _expected_of_host_sources(conn, urls)
    return expected


def _expected_of_host_sources(conn: sa.Connection, urls: MediaUrls) -> set[Row]:
    """Every row of every source beyond content, extracted as a content row would be."""
    expected: set[Row] = set()
    for source in list_sources(conn):
        paths = conn.execute(
            sa.text("SELECT field_slug, path FROM _media_usage_worker_reference_paths "
                    "WHERE collection_id = :id"), {"id": source.collection_id},
        ).all()  # fmt: skip
        extraction = extraction_fields(source.fields(paths))
        names = ", ".join(f'"{name}"' for name, _ in source.columns)
        query = f'SELECT "{source.key_column}" AS id, {names} FROM "{source.table}"'
        for row in conn.execute(sa.text(query)).mappings().all():
            if not is_usable_identifier(row["id"]):
                continue
            snapshots = build_snapshots(
                collection_id=source.collection_id, collection_slug=source.scope_key,
                fields=extraction, row=dict(row), display_fields=[], revision=None,
                media_urls=urls,
            )  # fmt: skip
            for snapshot in snapshots.snapshots:
                key = snapshot.source["source_key"]
                expected.update(_row(key, o) for o in snapshot.occurrences)
    return expected


def _media_urls(conn: sa.Connection) -> MediaUrls:
    """Every prefix, and every storage key's lowest media id (library or quarantine: a URL use
    of a retired item is a use), read at once."""
    prefixes = conn.execute(sa.text("SELECT prefix FROM _media_usage_worker_media_url_prefixes"))
    keys = conn.execute(
        sa.text(
            "SELECT storage_key, MIN(id) FROM (SELECT storage_key, id FROM media UNION ALL "
            "SELECT storage_key, id FROM _media_usage_worker_quarantine) AS k "
            "GROUP BY storage_key"
        )
    )
    return MediaUrls(tuple(prefixes.scalars()), dict(keys.all()).get)


def actual_index(engine: sa.Engine) -> set[Row]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT u.source_key, u.field_path, u.reference_type, u.media_id, u.provider, "
                "u.provider_asset_id, u.media_kind, u.mime_type "
                "FROM _emdash_media_usage AS u JOIN _emdash_media_usage_sources AS s "
                "ON s.source_key = u.source_key AND s.current_generation = u.generation"
            )
        ).all()
    return {tuple(row) for row in rows}


def expected_source_keys(engine: sa.Engine) -> set[str]:
    """Every live entry has a columns source (and a draft_overlay one when it has a draft)."""
    keys = set()
    registry = CollectionRegistry(engine)
    with engine.connect() as conn:
        for collection in registry.list():
            for content_id, draft in conn.execute(
                sa.text(f"SELECT id, draft_revision_id FROM ec_{collection.slug}")
            ):
                if not is_usable_identifier(content_id):
                    continue
                keys.add(f"content:{collection.id}:{content_id}:columns")
                if draft:
                    keys.add(f"content:{collection.id}:{content_id}:draft_overlay")
    return keys


def actual_source_keys(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        return set(
            conn.execute(sa.text("SELECT source_key FROM _emdash_media_usage_sources")).scalars()
        )
