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

from collections.abc import Callable, Collection, Mapping, Sequence
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
from repository.db import Bind, transaction
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


def load_entry(
    conn: sa.Connection,
    entry: ContentEntry,
    columns: Sequence[str],
    as_text: Collection[str] = (),
) -> tuple[dict[str, Any] | None, Revision | None]:
    """The content row (only if the collection still has this id and slug) and its draft.

    Columns in ``as_text`` are read as their JSON text: psycopg would otherwise parse a
    ``json`` column while fetching it, before the size check could refuse an entry too large.
    """
    names = list(dict.fromkeys([*SYSTEM_COLUMNS, *columns]))
    content = content_columns(entry.collection_slug, names).alias("content")
    selected = [
        sa.cast(column, sa.Text).label(column.name) if column.name in as_text else column
        for column in content.c
    ]
    row = conn.execute(
        sa.select(*selected)
        .select_from(
            content.join(
                collections,
                sa.and_(
                    collections.c.slug == entry.collection_slug,
                    collections.c.id == entry.collection_id,
                ),
            )
        )
        .where(content.c.id == entry.content_id)
        .limit(1)
    ).first()
    if row is None:
        return None, None
    values = dict(row._mapping)
    revision = None
    if isinstance(values.get("draft_revision_id"), str):
        found = conn.execute(
            sa.select(revisions.c.collection, revisions.c.entry_id, revisions.c.data).where(
                revisions.c.id == values["draft_revision_id"]
            )
        ).first()
        revision = None if found is None else Revision(*found)
    return values, revision


@dataclass(frozen=True)
class EntryState:
    """What one refresh reads in one transaction: the entry, its draft, fields and sources."""

    fields: list[FieldDefinition]
    row: dict[str, Any] | None  # None: the entry is gone
    revision: Revision | None
    observed: dict[str, dict[str, Any]]  # the entry's source rows by variant
    collection_present: bool


def read_entry_state(
    bind: Bind, entry: ContentEntry, columns_for: Callable[[list[FieldDefinition]], list[str]]
) -> EntryState:
    """One consistent read of what a refresh needs; ``columns_for`` names the content columns
    to read from the collection's fields."""
    with transaction(bind) as conn:
        observed = observed_sources(conn, entry)
        fields = load_fields(conn, entry.collection_id)
        row, revision = load_entry(
            conn,
            entry,
            columns_for(fields),
            as_text={f.slug for f in fields if f.column_type == "JSON"},
        )
        present = row is not None or bool(
            conn.execute(
                sa.select(registered(entry.collection_id, entry.collection_slug))
            ).scalar_one()
        )
    return EntryState(fields, row, revision, observed, present)


def observed_sources(conn: sa.Connection, entry: ContentEntry) -> dict[str, dict[str, Any]]:
    """The entry's canonical source rows by variant."""
    keys = [source_key(entry.collection_id, entry.content_id, v) for v in REVISION_COLUMN]
    rows = conn.execute(sa.select(sources).where(s.source_key.in_(keys))).all()
    return {row.source_variant: dict(row._mapping) for row in rows}


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


def still_unchanged(bind: Bind, snapshot: Snapshot, observed: Mapping[str, Any]) -> bool:
    """The unchanged source is still exactly as observed, in a registered collection."""
    source = snapshot.source
    with transaction(bind) as conn:
        found = conn.execute(
            sa.select(1).where(
                *_matches(observed),
                registered(source["collection_id"], source["collection_slug"]),
            )
        ).first()
    return found is not None


def _fence(lease: Lease | None) -> list[sa.ColumnElement[bool]]:
    return [] if lease is None else [lease_held(lease)]


def replace_source_if_matching(
    bind: Bind,
    snapshot: Snapshot,
    observed: Mapping[str, Any] | None,
    lease: Lease | None = None,
) -> bool:
    """Write ``snapshot`` as a new generation; ``False`` when a guard no longer holds.

    With ``lease`` the write also needs that work lease to still hold its row, so a processor
    that lost its lease mid-refresh writes nothing.
    """
    source = snapshot.source
    generation = new_ulid()
    try:
        with transaction(bind) as conn:
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
    except PromotionLost:
        return False
    return True


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


def delete_source_if_matching(
    bind: Bind,
    observed: Mapping[str, Any],
    *,
    content_absent: bool,
    lease: Lease | None = None,
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
    with transaction(bind) as conn:
        deleted = conn.execute(sources.delete().where(*guards).returning(s.source_key)).first()
        if deleted is None:
            return False
        conn.execute(occurrences.delete().where(occurrences.c.source_key == observed["source_key"]))
    return True
