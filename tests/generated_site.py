"""A site of any size, generated in the database by SQL in seconds: the index of ``entries``
entries of one collection (about 4.7 occurrences each, a quarter with a draft, 5 % trashed)
and a media library of ``library`` items. For plan tests and the read benchmark, where the
index's size and shape matter and how it was built does not."""

from __future__ import annotations

import re

import sqlalchemy as sa

_SLUG = re.compile(r"[a-z][a-z0-9_]{0,39}")
_ULID = re.compile(r"[0-9A-Z]{26}")


def generate_site(
    engine: sa.Engine, collection_id: str, slug: str, entries: int, library: int
) -> None:
    # Inlined into the SQL (a recursive CTE cannot take them as parameters everywhere), so
    # checked first: a ULID and a slug this project made.
    assert _ULID.fullmatch(collection_id) and _SLUG.fullmatch(slug)
    assert entries > 0 and library > 0
    numbers = f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {entries})"
    cid, sl = f"'{collection_id}'", f"'{slug}'"
    status = "CASE WHEN i % 4 = 0 THEN 'draft' ELSE 'published' END"
    deleted = "CASE WHEN i % 20 = 0 THEN '2026-01-01T00:00:00.000Z' ELSE NULL END"
    columns = """(source_key, source_type, collection_slug, content_id, source_variant,
                  content_status, content_deleted_at, current_generation, collection_id,
                  identity_version)"""
    media_of = f"'media-' || ((i * 7 + j * 13) % {library})"
    statements = [
        f"""WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {library - 1})
            INSERT INTO media (id, filename, mime_type, storage_key)
            SELECT 'media-' || i, 'f' || i || '.jpg', 'image/jpeg', 'k' || i FROM n""",
        f"""{numbers} INSERT INTO _emdash_media_usage_sources {columns}
            SELECT 'content:' || {cid} || ':e' || i || ':columns', 'content', {sl}, 'e' || i,
                   'columns', {status}, {deleted}, 'g1', {cid}, 1 FROM n""",
        f"""{numbers} INSERT INTO _emdash_media_usage_sources {columns}
            SELECT 'content:' || {cid} || ':e' || i || ':draft_overlay', 'content', {sl},
                   'e' || i, 'draft_overlay', {status}, {deleted}, 'g1', {cid}, 1
            FROM n WHERE i % 4 = 0""",
        f"""{numbers}, k(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM k WHERE j < 4)
            INSERT INTO _emdash_media_usage
            (id, source_key, generation, field_slug, field_path, occurrence_index,
             reference_type, media_id, provider_asset_id)
            SELECT 'o' || i || '-' || j, 'content:' || {cid} || ':e' || i || ':columns', 'g1',
                   'hero', 'hero', j, 'image_field', {media_of}, {media_of}
            FROM n CROSS JOIN k WHERE j < 4 OR i % 10 < 7""",
    ]
    with engine.begin() as conn:
        for statement in statements:
            if engine.dialect.name == "postgresql":  # psycopg reads % as a placeholder
                statement = statement.replace("%", "%%")
            conn.exec_driver_sql(statement)
