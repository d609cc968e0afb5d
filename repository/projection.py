"""The index slice of one entry: its sources and their occurrence generations (design §10).

A refresh writes a whole new generation of occurrences and promotes it with one guarded
statement that holds only while (a) the source row is still what the processor observed and
(b) the content row is still the version the snapshot was taken from. Both checks run in the
same transaction as the occurrence insert, so a processor holding a stale read can never
overwrite what a newer one wrote; a lost compare-and-set rolls the whole write back.

Unlike emdash (which leaves superseded generations to a separate GC), the previous generation's
occurrences are deleted in the promoting transaction, so the index never accumulates garbage.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.errors import PromotionLost
from media_usage_worker.domain.snapshots import ContentEntry, Revision, Snapshot, source_key
from media_usage_worker.domain.work import Lease
from repository.clock import db_now
from repository.collections import load_fields
from repository.content_tables import content_columns
from repository.db import Bind, read_transaction, transaction
from repository.ids import new_ulid
from repository.predicates import lease_held, registered
from repository.schema import collections, occurrences, revisions, sources
from repository.upsert import insert_factory

s = sources.c
MATCH_COLUMNS = (
    "current_generation",
    "source_completeness",
    "collection_id",
    "updated_at",
    "source_fingerprint",
    "source_updated_at",
    "source_version",
    "identity_version",
    "revision_id",
    "last_attempted_at",
    "last_error_code",
)
SYSTEM_COLUMNS = (
    "id", "slug", "status", "created_at", "updated_at", "published_at", "scheduled_at",
    "deleted_at", "version", "live_revision_id", "draft_revision_id", "locale",
    "translation_group",
)  # fmt: skip
REVISION_COLUMN = {"columns": "live_revision_id", "draft_overlay": "draft_revision_id"}


@dataclass(frozen=True)
class EntryState:
    """What one refresh reads: the entry (``None`` if gone), its draft and its source rows."""

    entry: ContentEntry
    row: dict[str, Any] | None
    revision: Revision | None
    observed: dict[str, dict[str, Any]]  # the entry's source rows by variant


@dataclass(frozen=True)
class CollectionState:
    """One consistent read of a collection's fields and of some of its entries."""

    fields: list[FieldDefinition]
    present: bool  # the collection is still registered with this id and slug
    entries: dict[str, EntryState]  # by content id


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
    ids = list(dict.fromkeys(content_ids))
    with read_transaction(bind) as conn:
        fields = load_fields(conn, collection_id)
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
    return CollectionState(fields, present, entries)


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
    content = content_columns(slug, names).alias("content")
    selected = [
        sa.cast(column, sa.Text).label(column.name) if column.name in as_text else column
        for column in content.c
    ]
    query = (
        sa.select(*selected)
        .select_from(
            content.join(
                collections, sa.and_(collections.c.slug == slug, collections.c.id == collection_id)
            )
        )
        .where(content.c.id.in_(ids))
    )
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
    keys = [source_key(collection_id, i, v) for i in ids for v in REVISION_COLUMN]
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for row in conn.execute(sa.select(sources).where(s.source_key.in_(keys))):
        found.setdefault(row.content_id, {})[row.source_variant] = dict(row._mapping)
    return found


def _matches(observed: Mapping[str, Any]) -> list[sa.ColumnElement[bool]]:
    return [s.source_key == observed["source_key"]] + [
        s[name].is_not_distinct_from(observed[name]) for name in MATCH_COLUMNS
    ]


def _content_unchanged(snapshot: Snapshot) -> sa.ColumnElement[bool]:
    """The content row is still the one the snapshot was read from."""
    source = snapshot.source
    if source["source_version"] is None or source["source_updated_at"] is None:
        return sa.false()
    revision_column = REVISION_COLUMN[snapshot.variant]
    content = content_columns(
        source["collection_slug"], ["id", "version", "updated_at", revision_column]
    )
    return sa.exists(
        sa.select(1).where(
            content.c.id == source["content_id"],
            content.c.version == source["source_version"],
            content.c.updated_at == source["source_updated_at"],
            content.c[revision_column].is_not_distinct_from(source["revision_id"]),
        )
    )


def is_unchanged(snapshot: Snapshot, observed: Mapping[str, Any] | None) -> bool:
    """Same fingerprint, complete and error-free: writing it again would change nothing."""
    return (
        observed is not None
        and observed["source_fingerprint"] == snapshot.fingerprint
        and observed["source_completeness"] == "complete"
        and observed["last_error_code"] is None
    )


def _fence(lease: Lease | None) -> list[sa.ColumnElement[bool]]:
    return [] if lease is None else [lease_held(lease)]


@dataclass(frozen=True)
class EntryWrite:
    """What one entry's refresh writes: applied all or nothing (``apply_entry_write``).

    Every part keeps its own compare-and-set: an unchanged source must still be exactly as read,
    a new generation is promoted only over the source row that was read and while the content
    row is still the version the snapshot came from, a removal only while the source is as
    read (and, with ``content_absent``, while the entry stays gone). With ``lease`` every
    statement also needs that work lease to still hold its row.
    """

    keep: tuple[tuple[Snapshot, Mapping[str, Any]], ...] = ()
    replace: tuple[tuple[Snapshot, Mapping[str, Any] | None], ...] = ()
    remove: tuple[Mapping[str, Any], ...] = ()
    content_absent: bool = False
    lease: Lease | None = None


def apply_entry_write(conn: sa.Connection, write: EntryWrite) -> bool:
    """Apply ``write`` under a savepoint of the caller's transaction; ``False`` (and nothing
    of it written) when one of its guards no longer holds. Other entries are unaffected."""
    try:
        with conn.begin_nested():
            for snapshot, observed in write.keep:
                _check_unchanged(conn, snapshot, observed)
            for snapshot, current in write.replace:
                _promote(conn, snapshot, current, write.lease)
            for source in write.remove:
                _remove(conn, source, content_absent=write.content_absent, lease=write.lease)
    except PromotionLost:
        return False
    return True


def write_entry(bind: Bind, write: EntryWrite) -> bool:
    """``apply_entry_write`` in a transaction of its own."""
    with transaction(bind) as conn:
        return apply_entry_write(conn, write)


def _check_unchanged(conn: sa.Connection, snapshot: Snapshot, observed: Mapping[str, Any]) -> None:
    source = snapshot.source
    found = conn.execute(
        sa.select(1).where(
            *_matches(observed), registered(source["collection_id"], source["collection_slug"])
        )
    ).first()
    if found is None:
        raise PromotionLost


def _promote(
    conn: sa.Connection,
    snapshot: Snapshot,
    observed: Mapping[str, Any] | None,
    lease: Lease | None,
) -> None:
    """Write ``snapshot`` as a new generation and drop the one it replaces."""
    source = snapshot.source
    generation = new_ulid()
    # FOR KEY SHARE keeps the collection from being deleted under the write (PostgreSQL);
    # the same statement reads the database clock for every timestamp of the write.
    locked = conn.execute(
        sa.select(collections.c.id, db_now().label("now"))
        .where(
            collections.c.id == source["collection_id"],
            collections.c.slug == source["collection_slug"],
        )
        .with_for_update(key_share=True)
    ).first()
    if locked is None:
        raise PromotionLost
    now = locked.now
    if snapshot.occurrences:
        conn.execute(
            occurrences.insert(),
            [
                {
                    "id": new_ulid(),
                    "source_key": source["source_key"],
                    "generation": generation,
                    "field_slug": o.field_slug,
                    "field_path": o.field_path,
                    "occurrence_index": o.occurrence_index,
                    "reference_type": o.reference_type,
                    "media_id": o.media_id,
                    "provider": o.provider,
                    "provider_asset_id": o.provider_asset_id,
                    "media_kind": o.media_kind,
                    "mime_type": o.mime_type,
                    "created_at": now,
                }
                for o in snapshot.occurrences
            ],
        )
    values = {
        **source,
        "current_generation": generation,
        "last_attempted_at": now,
        "last_error_code": None,
        "indexed_at": now,
        "updated_at": now,
    }
    guards = [
        registered(source["collection_id"], source["collection_slug"]),
        _content_unchanged(snapshot),
        *_fence(lease),
    ]
    if observed is None:
        promoted = _insert_source(conn, values, guards)
    else:
        promoted = conn.execute(
            sources.update()
            .where(*_matches(observed), *guards)
            .values(**values)
            .returning(s.source_key)
        ).first()
    if promoted is None:
        raise PromotionLost
    if observed is not None:
        _delete_generation(conn, observed["source_key"], observed["current_generation"])


def _insert_source(
    conn: sa.Connection, values: Mapping[str, Any], guards: list[sa.ColumnElement[bool]]
) -> sa.Row[Any] | None:
    names = list(values)
    select = sa.select(*(sa.literal(values[n], sources.c[n].type).label(n) for n in names)).where(
        *guards
    )
    statement = (
        insert_factory(conn)(sources)
        .from_select(names, select)
        .on_conflict_do_nothing(index_elements=[s.source_key])
        .returning(s.source_key)
    )
    return conn.execute(statement).first()


def _delete_generation(conn: sa.Connection, key: str, generation: str) -> None:
    o = occurrences.c
    conn.execute(occurrences.delete().where(o.source_key == key, o.generation == generation))


def _remove(
    conn: sa.Connection,
    observed: Mapping[str, Any],
    *,
    content_absent: bool,
    lease: Lease | None,
) -> None:
    """Remove a vanished source (and its occurrences) if it is still as observed."""
    guards = [
        *_fence(lease),
        *_matches(observed),
        registered(observed["collection_id"], observed["collection_slug"]),
    ]
    if content_absent:
        content = content_columns(observed["collection_slug"], ["id"])
        guards.append(~sa.exists(sa.select(1).where(content.c.id == observed["content_id"])))
    deleted = conn.execute(sources.delete().where(*guards).returning(s.source_key)).first()
    if deleted is None:
        raise PromotionLost
    conn.execute(occurrences.delete().where(occurrences.c.source_key == observed["source_key"]))
