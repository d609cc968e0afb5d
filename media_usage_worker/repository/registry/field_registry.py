"""The fields a scope is indexed with, as the registry holds them now, and their fingerprint.

A collection's fields live in ``_emdash_fields``, which the CMS itself changes (emdash's schema
registry adds and deletes fields without this project's API). The index of a collection is
only complete for the fields it was computed with, so the fingerprint of those fields is
recorded with its rules (``rules_state.record_indexed_rules``) and compared with the registry's
on every read of coverage and by the reconcile tick (docs/design.md §5, "Following the CMS's
schema").
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.content_model import (
    MAX_VALIDATION_DEPTH,
    FieldDefinition,
    nested_deeper_than,
)
from media_usage_worker.domain.host_sources import ID_PREFIX, HostSource
from media_usage_worker.domain.snapshots import field_fingerprint
from media_usage_worker.repository.base.db import Bind, read_transaction
from media_usage_worker.repository.base.schema import collections, fields, reference_paths
from media_usage_worker.repository.registry.host_sources import find_source, list_sources

_DECLARED_PATHS = (
    sa.select(reference_paths.c.field_slug, reference_paths.c.path)
    .where(reference_paths.c.collection_id == sa.bindparam("collection_id"))
    .order_by(reference_paths.c.path)
)
_FIELD_COLUMNS = (
    fields.c.collection_id,
    fields.c.slug,
    fields.c.label,
    fields.c.type,
    fields.c.required,
    fields.c.validation,
)
_ORDER = (fields.c.sort_order, fields.c.slug)


def load_fields(bind: Bind, collection_id: str) -> list[FieldDefinition]:
    """The collection's fields in their sort order, each with the reference paths declared
    into it (validation JSON parsed); a source beyond content's columns, as fields
    (``domain.host_sources``). In the caller's transaction when it is in one."""
    with read_transaction(bind) as conn:
        paths = conn.execute(_DECLARED_PATHS, {"collection_id": collection_id}).all()
        if collection_id.startswith(ID_PREFIX):
            source = find_source(conn, collection_id)
            return [] if source is None else source.fields((f, p) for f, p in paths)
        declared = _by_field([(f, p) for f, p in paths])
        rows = conn.execute(
            sa.select(*_FIELD_COLUMNS)
            .where(fields.c.collection_id == collection_id)
            .order_by(*_ORDER)
        ).all()
    return [_definition(row, declared) for row in rows]


_ALL_PATHS = sa.select(
    reference_paths.c.collection_id, reference_paths.c.field_slug, reference_paths.c.path
).order_by(reference_paths.c.collection_id, reference_paths.c.path)
_COLLECTION_IDS = sa.select(collections.c.id)
_ALL_FIELDS = sa.select(*_FIELD_COLUMNS).order_by(fields.c.collection_id, *_ORDER)


def current_fingerprints(
    conn: sa.Connection, sources: Sequence[HostSource] | None = None
) -> dict[str, str]:
    """The fingerprint of every registered collection's and source's fields as they are now,
    by collection id, in three statements whatever the number of collections (four without
    ``sources``, the registered sources when the caller has read them already).

    Every coverage read asks this, and the registry rarely changes: the rows are read each
    time, and what is computed from them (validation parsed, fields hashed) is remembered for
    the same rows exactly."""
    paths = tuple(conn.execute(_ALL_PATHS).all())
    ids = tuple(conn.execute(_COLLECTION_IDS).scalars())
    rows = tuple(conn.execute(_ALL_FIELDS).all())
    known = tuple(list_sources(conn) if sources is None else sources)
    return dict(_fingerprints_of(paths, ids, rows, known))


@functools.lru_cache(maxsize=16)
def _fingerprints_of(
    paths: tuple[Any, ...], ids: tuple[str, ...], rows: tuple[Any, ...], sources: tuple[Any, ...]
) -> dict[str, str]:
    """``current_fingerprints`` of rows read (pure: the same rows, the same fingerprints; the
    caller copies the dict it returns)."""
    pairs: dict[str, list[tuple[str, str]]] = {}
    for collection_id, field_slug, path in paths:
        pairs.setdefault(collection_id, []).append((field_slug, path))
    by_collection: dict[str, list[FieldDefinition]] = {collection_id: [] for collection_id in ids}
    for row in rows:
        if row.collection_id in by_collection:
            declared = _by_field(pairs.get(row.collection_id, []))
            by_collection[row.collection_id].append(_definition(row, declared))
    found = {cid: field_fingerprint(defined) for cid, defined in by_collection.items()}
    for source in sources:
        found[source.collection_id] = field_fingerprint(
            source.fields(pairs.get(source.collection_id, []))
        )
    return found


def _by_field(pairs: list[tuple[str, str]]) -> dict[str, list[str]]:
    declared: dict[str, list[str]] = {}
    for field_slug, path in pairs:
        declared.setdefault(field_slug, []).append(path)
    return declared


def fields_fingerprint(conn: sa.Connection, collection_id: str) -> str:
    return field_fingerprint(load_fields(conn, collection_id))


def _definition(row: Any, declared: dict[str, list[str]]) -> FieldDefinition:
    validation = _parse_validation(row.validation)
    return FieldDefinition(
        slug=row.slug,
        label=row.label,
        type=row.type,
        required=bool(row.required),
        validation=validation,
        validation_unreadable=validation is None and row.validation is not None,
        reference_paths=tuple(declared.get(row.slug, ())),
    )


def _parse_validation(raw: str | None) -> dict[str, Any] | None:
    """The stored validation object; ``None`` when absent or not a JSON object."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # nested past the recursion limit is no validation
        return None
    if not isinstance(value, dict) or nested_deeper_than(value, MAX_VALIDATION_DEPTH):
        return None
    return value
