"""The write side of the index slice: promote, keep and remove source rows (design §10).

A refresh writes a whole new generation of occurrences and promotes it with a guarded
statement that holds only while (a) the source row is still what the processor observed and
(b) the content row is still the version the snapshot was taken from. Both checks run in the
same transaction as the occurrence insert, so a processor holding a stale read can never
overwrite what a newer one wrote. Unlike emdash, which leaves superseded generations to a
separate collector, the generation a promotion replaces is deleted in the same transaction.

A batch of entries is written with a few statements whose text does not depend on its size:
every source of one shape (insert or update, which revision column, fenced or not) is one row
of a row set (``repository.row_sets``), and each row's guards apply to that row alone. A row
whose guard lost is simply not returned; its entry is reported as not held.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import astuple, dataclass
from typing import Any, NamedTuple

import sqlalchemy as sa

from media_usage_worker.domain.host_sources import Scope
from media_usage_worker.domain.refresh_plan import MATCH_COLUMNS, REVISION_COLUMN, EntryWrite
from media_usage_worker.domain.snapshots import Snapshot
from media_usage_worker.domain.work import Lease
from media_usage_worker.repository.base.clock import db_now
from media_usage_worker.repository.base.db import Bind, transaction
from media_usage_worker.repository.base.ids import new_ulid
from media_usage_worker.repository.base.predicates import (
    lease_held,
    lease_held_by,
    lease_holds_row,
    registered,
)
from media_usage_worker.repository.base.row_sets import RowSet
from media_usage_worker.repository.base.schema import (
    collections,
    host_sources,
    occurrences,
    sources,
    work,
)
from media_usage_worker.repository.base.upsert import insert_factory_for
from media_usage_worker.repository.quarantine.cleanup import restore_retired_in_use
from media_usage_worker.repository.registry.content_tables import scope_columns

__all__ = [
    "EntryWrite",
    "IndexedWrites",
    "apply_writes",
    "index_writes",
    "write_entries",
    "write_entry",
]
_s = sources.c
_LEASE_COLUMNS = (
    ("l_collection_id", sa.Text()),
    ("l_content_id", sa.Text()),
    ("l_work_version", sa.BigInteger()),
    ("l_lease_token", sa.Text()),
)
_LEASES = RowSet("leases", _LEASE_COLUMNS)
_MATCHED = (("m_source_key", sa.Text()), *((f"m_{n}", _s[n].type) for n in MATCH_COLUMNS))
_KEPT = RowSet(
    "kept", (*_MATCHED, ("g_collection_id", sa.Text()), ("g_collection_slug", sa.Text()))
)
_REPLACED = RowSet("replaced", (("source_key", sa.Text()), ("generation", sa.Text())))
_OCCURRENCE_COLUMNS = (
    "id", "source_key", "generation", "field_slug", "field_path", "occurrence_index",
    "reference_type", "media_id", "provider", "provider_asset_id", "media_kind", "mime_type",
    "created_at",
)  # fmt: skip
_OCCURRENCES = RowSet(
    "occurrence_rows", tuple((n, occurrences.c[n].type) for n in _OCCURRENCE_COLUMNS)
)


@dataclass(frozen=True)
class _Promotion:
    """One source to promote: which write it belongs to and the row of its statement."""

    write: int
    shape: tuple[str, tuple[str, ...], str, str, bool, bool]
    row: tuple[Any, ...]
    source_key: str
    generation: str
    snapshot: Snapshot
    replaced: tuple[str, str] | None  # the source key and generation it replaces


class IndexedWrites(NamedTuple):
    """What ``index_writes`` did: per write, whether all of it held; and the media ids the
    occurrences it inserted name (uses that may have begun just now)."""

    held: list[bool]
    used: list[str]


def apply_writes(conn: sa.Connection, writes: Sequence[EntryWrite]) -> list[bool]:
    """The two steps of a batch's transaction (the caller's), in order: the index rows
    (``index_writes``), then every retired item a write uses again back into the library
    (``restore_retired_in_use``: the use began after its retirement, docs/design.md §13).
    Per write, whether all of it held."""
    indexed = index_writes(conn, writes)
    restore_retired_in_use(conn, indexed.used)
    return indexed.held


def index_writes(conn: sa.Connection, writes: Sequence[EntryWrite]) -> IndexedWrites:
    """Write each entry's index rows inside the caller's transaction.

    First every kept source is checked in one statement; a write whose check lost is left
    alone. Then the others' sources are promoted, one statement per shape. A source's new
    occurrences are inserted only once its row points at their generation, so a guard that
    loses writes nothing for that source; a write that lost one of two variants keeps the
    other, consistent on its own, and its caller refreshes it again. Removals run last, for
    writes whose promotions all held.
    """
    now = _lock_collections(conn, writes)
    if now is None:
        return IndexedWrites([False] * len(writes), [])
    leased = _hold_leases(conn, writes)
    held = [lease and keep for lease, keep in zip(leased, _keeps_hold(conn, writes), strict=True)]
    promotions, unpromotable = _promotions(conn.dialect.name, writes, held, now)
    promoted = _promote_all(conn, promotions)
    occurrence_rows: list[tuple[Any, ...]] = []
    replaced: list[tuple[str, str]] = []
    for p in promotions:
        if p.source_key in promoted:
            occurrence_rows += _occurrence_rows(p.snapshot, p.generation, now)
            replaced += [p.replaced] if p.replaced is not None else []
        else:
            held[p.write] = False
    for index in unpromotable:
        held[index] = False
    if occurrence_rows:
        statement = _insert_occurrences_statement(conn.dialect.name)
        conn.execute(statement, _OCCURRENCES.bind(occurrence_rows))
    if replaced:
        conn.execute(_delete_generations_statement(conn.dialect.name), _REPLACED.bind(replaced))
    for index, write in enumerate(writes):
        if held[index] and write.remove:
            held[index] = all(
                _remove(conn, source, content_absent=write.content_absent, lease=write.lease)
                for source in write.remove
            )
    return IndexedWrites(held, [row[_MEDIA_ID] for row in occurrence_rows if row[_MEDIA_ID]])


def write_entry(bind: Bind, write: EntryWrite) -> bool:
    """``apply_writes`` of one entry in a transaction of its own."""
    return write_entries(bind, [write])[0]


def write_entries(bind: Bind, writes: Sequence[EntryWrite]) -> list[bool]:
    """``apply_writes`` in a transaction of its own."""
    if not writes:
        return []
    with transaction(bind) as conn:
        return apply_writes(conn, writes)


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
        # A source beyond content is registered (and removed) in its own registry.
        if not Scope.of(slug).is_content:
            registry = host_sources.c
            identity = [registry.collection_id == collection_id, registry.scope_key == slug]
        else:
            registry = collections.c
            identity = [registry.id == collection_id, registry.slug == slug]
        locked = conn.execute(
            sa.select(db_now().label("now")).where(*identity).with_for_update(key_share=True)
        ).first()
        if locked is None:
            return None
        now = locked.now
    return now if now is not None else conn.execute(sa.select(db_now())).scalar_one()


def _hold_leases(conn: sa.Connection, writes: Sequence[EntryWrite]) -> list[bool]:
    """Per write, whether its lease (if it has one) holds; held leases stay held until commit.

    Checking a lease is not enough on PostgreSQL: each statement reads its own snapshot, so a
    content write that commits while a promotion runs (bumping the work row's version) would
    not stop it. The rows are locked ``FOR SHARE`` instead: a capture trigger's upsert, a
    claimer or a renewal of such a row waits until this transaction ends, so every statement
    of it writes under a lease that still holds. A row someone is changing at this moment is
    skipped, not waited for: its lease is in doubt, and waiting could deadlock with a content
    write that touches several entries. SQLite has no row locks; its write transaction
    (``BEGIN IMMEDIATE``) already keeps every other writer out.
    """
    leases = [astuple(write.lease) for write in writes if write.lease is not None]
    if not leases:
        return [True] * len(writes)
    locked = {
        tuple(row) for row in conn.execute(_hold_statement(conn.dialect.name), _LEASES.bind(leases))
    }
    return [
        write.lease is None or (write.lease.collection_id, write.lease.content_id) in locked
        for write in writes
    ]


@functools.cache
def _hold_statement(dialect: str) -> sa.Select[Any]:
    # The work rows these leases still hold, found by key and locked until the commit.
    w = work.c
    lease = _LEASES.table(dialect).c
    leases = sa.select(
        lease.l_collection_id, lease.l_content_id, lease.l_work_version, lease.l_lease_token
    )
    return (
        sa.select(w.collection_id, w.content_id)
        .where(
            _LEASES.contains(dialect, w.content_id, "l_content_id"),
            sa.tuple_(w.collection_id, w.content_id, w.work_version, w.lease_token).in_(leases),
            *lease_holds_row(w.lease_token),
        )
        .with_for_update(read=True, skip_locked=True)
    )


def _keeps_hold(conn: sa.Connection, writes: Sequence[EntryWrite]) -> list[bool]:
    """Per write, whether every source it keeps is still exactly as it was read."""
    rows = [
        (
            seen["source_key"],
            *(seen[n] for n in MATCH_COLUMNS),
            snapshot.source["collection_id"],
            snapshot.source["collection_slug"],
        )
        for write in writes
        for snapshot, seen in write.keep
    ]
    if not rows:
        return [True] * len(writes)
    found = set(conn.execute(_keep_statement(conn.dialect.name), _KEPT.bind(rows)).scalars())
    return [all(seen["source_key"] in found for _, seen in write.keep) for write in writes]


def _promotions(
    dialect: str, writes: Sequence[EntryWrite], held: list[bool], now: str
) -> tuple[list[_Promotion], list[int]]:
    """The sources to promote of the writes still held, and the writes that cannot be.

    A content source without a content version to compare against is never promoted (a
    source beyond content has none: its write is fenced by its lease alone); a source key
    already promoted by an earlier write of the batch waits for its own refresh.
    """
    promotions: list[_Promotion] = []
    unpromotable: list[int] = []
    keys: set[str] = set()
    for index, write in enumerate(writes):
        if not held[index]:
            continue
        for snapshot, current in write.replace:
            source = snapshot.source
            key = source["source_key"]
            unversioned = source["source_version"] is None or source["source_updated_at"] is None
            if unversioned and Scope.of(source["collection_slug"]).is_content:
                unpromotable.append(index)
                continue
            if key in keys:
                unpromotable.append(index)
                continue
            keys.add(key)
            generation = new_ulid()
            promotions.append(_promotion(dialect, index, write, snapshot, current, generation, now))
    return promotions, unpromotable


def _promotion(
    dialect: str,
    index: int,
    write: EntryWrite,
    snapshot: Snapshot,
    current: Mapping[str, Any] | None,
    generation: str,
    now: str,
) -> _Promotion:
    values = {
        **snapshot.source,
        "current_generation": generation,
        "last_attempted_at": now,
        "last_error_code": None,
        "indexed_at": now,
        "updated_at": now,
    }
    row: tuple[Any, ...] = tuple(values.values())
    if current is not None:
        row += (current["source_key"], *(current[n] for n in MATCH_COLUMNS))
    if write.lease is not None:
        row += astuple(write.lease)
    shape = (
        dialect,
        tuple(values),
        snapshot.source["collection_slug"],
        REVISION_COLUMN[snapshot.variant],
        current is None,
        write.lease is not None,
    )
    replaced = None if current is None else (current["source_key"], current["current_generation"])
    key = snapshot.source["source_key"]
    return _Promotion(index, shape, row, key, generation, snapshot, replaced)


def _promote_all(conn: sa.Connection, promotions: list[_Promotion]) -> set[str]:
    """Run each shape's statement over its rows; the source keys whose guards held."""
    by_shape: dict[tuple[str, tuple[str, ...], str, str, bool, bool], list[tuple[Any, ...]]] = {}
    for p in promotions:
        by_shape.setdefault(p.shape, []).append(p.row)
    promoted: set[str] = set()
    for shape, rows in by_shape.items():
        row_set, statement = _promote_statement(*shape)
        promoted.update(conn.execute(statement, row_set.bind(rows)).scalars())
    return promoted


# Promotions run for every changed source: each shape is built once, over a row set, so the
# statement's text does not depend on the batch (and psycopg prepares it once it repeats).
@functools.lru_cache(maxsize=256)
def _promote_statement(
    dialect: str, names: tuple[str, ...], slug: str, revision_column: str, insert: bool,
    fenced: bool,
) -> tuple[RowSet, Any]:  # fmt: skip
    columns = [(f"v_{n}", _s[n].type) for n in names]
    if not insert:
        columns += _MATCHED
    if fenced:
        columns += _LEASE_COLUMNS
    row_set = RowSet("promoted", tuple(columns))
    v = row_set.table(dialect).c
    content = scope_columns(slug, ["id", "version", "updated_at", revision_column])
    if not Scope.of(slug).is_content:
        # A source's table has no version to compare: its row is still there, and (below)
        # the lease that every write to the row takes away still holds. Unleased, nothing
        # could tell a stale read, so nothing is written.
        unchanged = [content.c.id == v.v_content_id, sa.true() if fenced else sa.false()]
    else:
        # The content row is still the version (and revision) the snapshot was read from.
        unchanged = [
            content.c.id == v.v_content_id,
            content.c.version == v.v_source_version,
            content.c.updated_at == v.v_source_updated_at,
            content.c[revision_column].is_not_distinct_from(v.v_revision_id),
        ]
    guards: list[sa.ColumnElement[bool]] = [
        registered(v.v_collection_id, v.v_collection_slug),
        sa.exists(sa.select(1).where(*unchanged)),
    ]
    if fenced:
        guards.append(
            lease_held_by(v.l_collection_id, v.l_content_id, v.l_work_version, v.l_lease_token)
        )
    if insert:
        select = sa.select(*(v[f"v_{n}"].label(n) for n in names)).where(*guards)
        statement = (
            insert_factory_for(dialect)(sources)
            .from_select(list(names), select)
            .on_conflict_do_nothing(index_elements=[_s.source_key])
            .returning(_s.source_key)
        )
        return row_set, statement
    # The source row is still exactly as it was read.
    matches = [_s.source_key == v.m_source_key] + [
        _s[n].is_not_distinct_from(v[f"m_{n}"]) for n in MATCH_COLUMNS
    ]
    statement = (
        sources.update()
        .where(*matches, *guards)
        .values({n: v[f"v_{n}"] for n in names})
        .returning(_s.source_key)
    )
    return row_set, statement


@functools.cache
def _keep_statement(dialect: str) -> sa.Select[Any]:
    # The kept sources still exactly as read, in a collection still registered as read.
    k = _KEPT.table(dialect).c
    matches = [_s.source_key == k.m_source_key] + [
        _s[n].is_not_distinct_from(k[f"m_{n}"]) for n in MATCH_COLUMNS
    ]
    return sa.select(_s.source_key).where(
        *matches, registered(k.g_collection_id, k.g_collection_slug)
    )


@functools.cache
def _delete_generations_statement(dialect: str) -> sa.Delete:
    # The generations the promoted sources no longer point at: never read again.
    r = _REPLACED.table(dialect)
    o = occurrences.c
    pairs = sa.select(r.c.source_key, r.c.generation)
    return occurrences.delete().where(sa.tuple_(o.source_key, o.generation).in_(pairs))


@functools.cache
def _insert_occurrences_statement(dialect: str) -> sa.Insert:
    # A whole batch's new generations in one statement, whatever the number of rows.
    rows = _OCCURRENCES.table(dialect)
    return occurrences.insert().from_select(
        list(_OCCURRENCE_COLUMNS), sa.select(*(rows.c[n] for n in _OCCURRENCE_COLUMNS))
    )


# Where the media id is in a row of ``_OCCURRENCES`` (``_occurrence_rows``).
_MEDIA_ID = 7


def _occurrence_rows(snapshot: Snapshot, generation: str, now: str) -> list[tuple[Any, ...]]:
    """The rows of ``_OCCURRENCES`` for one snapshot's new generation."""
    key = snapshot.source["source_key"]
    return [
        (
            new_ulid(), key, generation, o.field_slug, o.field_path, o.occurrence_index,
            o.reference_type, o.media_id, o.provider, o.provider_asset_id, o.media_kind,
            o.mime_type, now,
        )
        for o in snapshot.occurrences
    ]  # fmt: skip


def _remove(
    conn: sa.Connection,
    observed: Mapping[str, Any],
    *,
    content_absent: bool,
    lease: Lease | None,
) -> bool:
    """Remove a vanished source (and its occurrences) if it is still as observed."""
    guards = [
        *([] if lease is None else [lease_held(lease)]),
        _s.source_key == observed["source_key"],
        *(_s[n].is_not_distinct_from(observed[n]) for n in MATCH_COLUMNS),
        registered(observed["collection_id"], observed["collection_slug"]),
    ]
    if content_absent:
        content = scope_columns(observed["collection_slug"], ["id"])
        guards.append(~sa.exists(sa.select(1).where(content.c.id == observed["content_id"])))
    deleted = conn.execute(sources.delete().where(*guards).returning(_s.source_key)).first()
    if deleted is None:
        return False
    conn.execute(occurrences.delete().where(occurrences.c.source_key == observed["source_key"]))
    return True
