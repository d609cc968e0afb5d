"""The read side of the index slice: what a refresh reads of its entries (design §10).

One consistent read of a collection's fields, the entries' content rows, their draft
revisions and their observed source rows, one statement each however many entries. The
write side, which promotes what was extracted from this read, is ``repository.source_writes``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Sequence
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.refresh_plan import (
    MATCH_COLUMNS,
    REVISION_COLUMN,
    CollectionState,
    EntryState,
    is_unchanged,
)
from media_usage_worker.domain.snapshots import ContentEntry, Revision, source_key
from media_usage_worker.repository.base.db import Bind, read_transaction
from media_usage_worker.repository.base.predicates import registered
from media_usage_worker.repository.base.row_sets import RowSet
from media_usage_worker.repository.base.schema import media, quarantine, revisions, sources
from media_usage_worker.repository.registry.content_tables import scope_columns
from media_usage_worker.repository.registry.field_registry import load_fields
from media_usage_worker.repository.registry.rules import read_media_url_prefixes

_s = sources.c
SYSTEM_COLUMNS = (
    "id", "slug", "status", "created_at", "updated_at", "published_at", "scheduled_at",
    "deleted_at", "version", "live_revision_id", "draft_revision_id", "locale",
    "translation_group",
)  # fmt: skip
__all__ = [
    "CONTENT_LOCK_TIMEOUT_MS",
    "MATCH_COLUMNS",
    "REVISION_COLUMN",
    "SYSTEM_COLUMNS",
    "CollectionState",
    "EntryState",
    "is_unchanged",
    "media_ids_by_storage_keys",
    "read_entries",
]
_KEYS = RowSet("source_keys", (("source_key", sa.Text()),))


def read_entries(
    bind: Bind,
    collection_id: str,
    slug: str,
    content_ids: Sequence[str],
    columns_for: Callable[[list[FieldDefinition]], list[str]],
) -> CollectionState:
    """Fields, content rows, draft revisions and sources of ``content_ids``: one statement each.

    ``columns_for`` names the content columns to read from the fields. JSON columns are read as
    their text: psycopg would otherwise parse a ``json`` column while fetching it, before the
    size check could refuse an entry too large.
    """
    with read_transaction(bind) as conn:
        if conn.dialect.name == "postgresql":
            # A host's migration holds ec_<slug> exclusively for as long as it runs; a worker
            # waiting for it is a worker every other collection's work waits for. The read
            # gives up instead, and its items retry with backoff.
            conn.execute(_CONTENT_LOCK_TIMEOUT)
        return read_entries_on(conn, collection_id, slug, content_ids, columns_for)


def read_entries_on(
    conn: sa.Connection,
    collection_id: str,
    slug: str,
    content_ids: Sequence[str],
    columns_for: Callable[[list[FieldDefinition]], list[str]],
) -> CollectionState:
    """``read_entries`` in the caller's transaction (the clean-up's fence reads the queued
    entries behind it)."""
    ids = list(dict.fromkeys(content_ids))
    fields = load_fields(conn, collection_id)
    prefixes = tuple(read_media_url_prefixes(conn))
    present = bool(conn.execute(sa.select(registered(collection_id, slug))).scalar_one())
    rows = _content_rows(conn, collection_id, slug, ids, columns_for(fields), fields)
    drafts = [r["draft_revision_id"] for r in rows.values()]
    revisions_by_id = _revisions(conn, [d for d in drafts if isinstance(d, str)])
    observed = _observed_sources(conn, collection_id, ids)
    entries = {}
    for content_id in ids:
        row = rows.get(content_id)
        draft = None if row is None else row.get("draft_revision_id")
        entries[content_id] = EntryState(
            ContentEntry(collection_id, slug, content_id),
            row,
            revisions_by_id.get(draft) if isinstance(draft, str) else None,
            observed.get(content_id, {}),
        )
    return CollectionState(fields, present, entries, prefixes)


CONTENT_LOCK_TIMEOUT_MS = 5000
_CONTENT_LOCK_TIMEOUT = sa.text(f"SET LOCAL lock_timeout = {CONTENT_LOCK_TIMEOUT_MS}")


def _content_rows(
    conn: sa.Connection,
    collection_id: str,
    slug: str,
    ids: list[str],
    columns: Sequence[str],
    fields: list[FieldDefinition],
) -> dict[str, dict[str, Any]]:
    """The content rows, only while the collection still has this id and slug."""
    as_text = {f.slug for f in fields if f.column_type == "JSON"}
    names = list(dict.fromkeys([*SYSTEM_COLUMNS, *columns]))
    content = scope_columns(slug, names).alias("content")
    selected = [
        sa.cast(column, sa.Text).label(column.name) if column.name in as_text else column
        for column in content.c
    ]
    query = sa.select(*selected).where(content.c.id.in_(ids), registered(collection_id, slug))
    return {row.id: dict(row._mapping) for row in conn.execute(query)}


def _revisions(conn: sa.Connection, ids: list[str]) -> dict[str, Revision]:
    if not ids:
        return {}
    r = revisions.c
    query = sa.select(r.id, r.collection, r.entry_id, r.data).where(r.id.in_(ids))
    return {row.id: Revision(row.collection, row.entry_id, row.data) for row in conn.execute(query)}


def _observed_sources(
    conn: sa.Connection, collection_id: str, ids: list[str]
) -> dict[str, dict[str, dict[str, Any]]]:
    """The entries' canonical source rows, by content id and variant."""
    keys = [(source_key(collection_id, i, v),) for i in ids for v in REVISION_COLUMN]
    found: dict[str, dict[str, dict[str, Any]]] = {}
    query = _observed_sources_statement(conn.dialect.name)
    for row in conn.execute(query, _KEYS.bind(keys)):
        found.setdefault(row.content_id, {})[row.source_variant] = dict(row._mapping)
    return found


@functools.cache
def _observed_sources_statement(dialect: str) -> sa.Select[Any]:
    # The keys as a row set: one statement text for any number of entries (an IN list of
    # bound values is a new text, planned anew, for every length).
    return sa.select(sources).where(_KEYS.contains(dialect, _s.source_key, "source_key"))


def media_ids_by_storage_keys(bind: Bind, storage_keys: Collection[str]) -> dict[str, str]:
    """The id of the media item whose file is each storage key, in one statement; keys no item
    has are left out. Keys are unique in practice; where not, the lowest id is the stable pick.

    Retired items count as well as the library's: a URL use of a retired item is a use that
    restores it, exactly like a use by id (the clean-up's rule, docs/design.md §13)."""
    if not storage_keys:
        return {}
    with read_transaction(bind) as conn:
        return media_ids_by_storage_keys_on(conn, storage_keys)


def media_ids_by_storage_keys_on(
    conn: sa.Connection, storage_keys: Collection[str]
) -> dict[str, str]:
    """``media_ids_by_storage_keys`` in the caller's transaction."""
    if not storage_keys:
        return {}
    wanted = sorted(storage_keys)
    holders = sa.union_all(
        sa.select(media.c.storage_key, media.c.id).where(media.c.storage_key.in_(wanted)),
        sa.select(quarantine.c.storage_key, quarantine.c.id).where(
            quarantine.c.storage_key.in_(wanted)
        ),
    ).subquery()
    statement = sa.select(holders.c.storage_key, sa.func.min(holders.c.id)).group_by(
        holders.c.storage_key
    )
    return {key: media_id for key, media_id in conn.execute(statement).all()}
