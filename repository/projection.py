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

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.snapshots import ContentEntry, Revision, Snapshot, source_key
from media_usage_worker.domain.work import Lease
from repository.clock import db_now
from repository.collections import load_fields
from repository.content_tables import content_columns
from repository.db import Bind, read_transaction, transaction
from repository.ids import new_ulid
from repository.predicates import lease_held, registered
from repository.schema import collections, occurrences, revisions, sources
from repository.upsert import insert_factory_for

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
    """What one entry's refresh writes (``apply_writes``).

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


def apply_writes(conn: sa.Connection, writes: Sequence[EntryWrite]) -> list[bool]:
    """Apply each write inside the caller's transaction; per write, whether all of it held.

    Each source row changes by one guarded statement, and a source's new occurrences are
    inserted only once its row points at their generation, so a guard that loses writes
    nothing for that source. An entry whose first guard loses is left alone; one whose later
    guard loses (its second variant) keeps the sources already promoted, each consistent on
    its own, and its caller refreshes it again. The new occurrences of every promoted source
    go in one insert and the generations they replace in one delete.
    """
    now = _lock_collections(conn, writes)
    occurrence_rows: list[dict[str, Any]] = []
    replaced: list[tuple[str, str]] = []
    held = [
        now is not None and _apply_one(conn, write, now, occurrence_rows, replaced)
        for write in writes
    ]
    if occurrence_rows:
        conn.execute(occurrences.insert(), occurrence_rows)
    if replaced:
        o = occurrences.c
        conn.execute(
            occurrences.delete().where(
                sa.or_(*(sa.and_(o.source_key == k, o.generation == g) for k, g in replaced))
            )
        )
    return held


def _apply_one(
    conn: sa.Connection,
    write: EntryWrite,
    now: str,
    occurrence_rows: list[dict[str, Any]],
    replaced: list[tuple[str, str]],
) -> bool:
    """One entry's guarded source statements; adds the occurrences to insert and the
    generations to delete once the batch's sources are written."""
    if not all(_unchanged(conn, snapshot, seen) for snapshot, seen in write.keep):
        return False
    for snapshot, current in write.replace:
        generation = new_ulid()
        if not _promote(conn, snapshot, current, write.lease, generation, now):
            return False
        occurrence_rows += _occurrence_rows(snapshot, generation, now)
        if current is not None:
            replaced.append((current["source_key"], current["current_generation"]))
    return all(
        _remove(conn, source, content_absent=write.content_absent, lease=write.lease)
        for source in write.remove
    )


def write_entry(bind: Bind, write: EntryWrite) -> bool:
    """``apply_writes`` of one entry in a transaction of its own."""
    with transaction(bind) as conn:
        return apply_writes(conn, [write])[0]


def _lock_collections(conn: sa.Connection, writes: Sequence[EntryWrite]) -> str | None:
    """Lock the writes' collection rows and read the database clock once for all of them.

    FOR KEY SHARE keeps a collection from being deleted under the write (PostgreSQL).
    ``None`` when a collection is no longer registered with its id and slug.
    """
    identities = {
        (snapshot.source["collection_id"], snapshot.source["collection_slug"])
        for write in writes
        for snapshot, _ in write.replace
    }
    now = None
    for collection_id, slug in sorted(identities):
        locked = conn.execute(
            sa.select(collections.c.id, db_now().label("now"))
            .where(collections.c.id == collection_id, collections.c.slug == slug)
            .with_for_update(key_share=True)
        ).first()
        if locked is None:
            return None
        now = locked.now
    return now if now is not None else conn.execute(sa.select(db_now())).scalar_one()


def _unchanged(conn: sa.Connection, snapshot: Snapshot, observed: Mapping[str, Any]) -> bool:
    source = snapshot.source
    found = conn.execute(
        sa.select(1).where(
            *_matches(observed), registered(source["collection_id"], source["collection_slug"])
        )
    ).first()
    return found is not None


def _occurrence_rows(snapshot: Snapshot, generation: str, now: str) -> list[dict[str, Any]]:
    key = snapshot.source["source_key"]
    return [
        {
            "id": new_ulid(),
            "source_key": key,
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
    ]


def _promote(
    conn: sa.Connection,
    snapshot: Snapshot,
    observed: Mapping[str, Any] | None,
    lease: Lease | None,
    generation: str,
    now: str,
) -> bool:
    """Point the source row at ``generation``, guarded; ``False`` when a guard lost.

    The guards: the collection is still registered, the content row is still the version the
    snapshot was read from, the source row is still as observed (or still absent), and the
    lease (if any) still holds its work row.
    """
    source = snapshot.source
    if source["source_version"] is None or source["source_updated_at"] is None:
        return False  # no content version to compare against: never promoted
    values = {
        **source,
        "current_generation": generation,
        "last_attempted_at": now,
        "last_error_code": None,
        "indexed_at": now,
        "updated_at": now,
    }
    statement = _promote_statement(
        conn.dialect.name, tuple(values), source["collection_slug"],
        REVISION_COLUMN[snapshot.variant], observed is None, lease is not None,
    )  # fmt: skip
    params = {f"v_{name}": value for name, value in values.items()}
    params.update(
        g_collection_id=source["collection_id"], g_slug=source["collection_slug"],
        c_id=source["content_id"], c_version=source["source_version"],
        c_updated_at=source["source_updated_at"], c_revision=source["revision_id"],
    )  # fmt: skip
    if observed is not None:
        params["m_source_key"] = observed["source_key"]
        params.update({f"m_{name}": observed[name] for name in MATCH_COLUMNS})
    if lease is not None:
        params.update({f"l_{k}": v for k, v in asdict(lease).items()})
    return conn.execute(statement, params).first() is not None


# Promotions run for every changed source: each shape is built once, with bound parameters
# only (building a statement of 26 literals per source cost more than running it).
@functools.lru_cache(maxsize=1024)
def _promote_statement(
    dialect: str, names: tuple[str, ...], slug: str, revision_column: str, insert: bool,
    fenced: bool,
) -> Any:  # fmt: skip
    content = content_columns(slug, ["id", "version", "updated_at", revision_column])
    guards: list[sa.ColumnElement[bool]] = [
        registered(sa.bindparam("g_collection_id"), sa.bindparam("g_slug")),
        sa.exists(
            sa.select(1).where(
                content.c.id == sa.bindparam("c_id"),
                content.c.version == sa.bindparam("c_version"),
                content.c.updated_at == sa.bindparam("c_updated_at"),
                content.c[revision_column].is_not_distinct_from(
                    sa.bindparam("c_revision", type_=sa.Text)
                ),
            )
        ),
    ]
    if fenced:
        guards.append(lease_held(_BOUND_LEASE))
    bound = {n: sa.bindparam(f"v_{n}", type_=sources.c[n].type) for n in names}
    if insert:
        select = sa.select(*(bound[n].label(n) for n in names)).where(*guards)
        return (
            insert_factory_for(dialect)(sources)
            .from_select(list(names), select)
            .on_conflict_do_nothing(index_elements=[s.source_key])
            .returning(s.source_key)
        )
    matches = [s.source_key == sa.bindparam("m_source_key")] + [
        s[n].is_not_distinct_from(sa.bindparam(f"m_{n}", type_=s[n].type)) for n in MATCH_COLUMNS
    ]
    return sources.update().where(*matches, *guards).values(**bound).returning(s.source_key)


# The lease fence of a cached statement: its values are bound per execution (``l_*``).
_BOUND_LEASE: Any = Lease(
    sa.bindparam("l_collection_id", type_=sa.Text),  # type: ignore[arg-type]
    sa.bindparam("l_content_id", type_=sa.Text),  # type: ignore[arg-type]
    sa.bindparam("l_work_version", type_=sa.BigInteger),  # type: ignore[arg-type]
    sa.bindparam("l_lease_token", type_=sa.Text),  # type: ignore[arg-type]
)


def _remove(
    conn: sa.Connection,
    observed: Mapping[str, Any],
    *,
    content_absent: bool,
    lease: Lease | None,
) -> bool:
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
        return False
    conn.execute(occurrences.delete().where(occurrences.c.source_key == observed["source_key"]))
    return True
