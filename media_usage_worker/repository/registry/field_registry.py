"""The fields a scope is indexed with, as the registry holds them now, and their fingerprint.

A collection's fields live in ``_emdash_fields``, which the CMS itself changes (emdash's schema
registry adds and deletes fields without this project's API). The index of a collection is
only complete for the fields it was computed with, so the fingerprint of those fields is
recorded with its rules (``rules_state.record_indexed_rules``) and compared with the registry's
on every read of coverage and by the reconcile tick (docs/design.md §5, "Following the CMS's
schema").
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.content_model import (
    MAX_VALIDATION_DEPTH,
    FieldDefinition,
    nested_deeper_than,
)
from media_usage_worker.domain.host_sources import ID_PREFIX
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


def current_fingerprints(conn: sa.Connection) -> dict[str, str]:
    """The fingerprint of every registered collection's and source's fields as they are now,
    by collection id, in three statements whatever the number of collections."""
    pairs: dict[str, list[tuple[str, str]]] = {}
    for collection_id, field_slug, path in conn.execute(
        sa.select(
            reference_paths.c.collection_id, reference_paths.c.field_slug, reference_paths.c.path
        ).order_by(reference_paths.c.collection_id, reference_paths.c.path)
    ):
        pairs.setdefault(collection_id, []).append((field_slug, path))
    by_collection: dict[str, list[FieldDefinition]] = {
        collection_id: [] for collection_id in conn.execute(sa.select(collections.c.id)).scalars()
    }
    rows = conn.execute(sa.select(*_FIELD_COLUMNS).order_by(fields.c.collection_id, *_ORDER))
    for row in rows:
        if row.collection_id in by_collection:
            declared = _by_field(pairs.get(row.collection_id, []))
            by_collection[row.collection_id].append(_definition(row, declared))
    found = {cid: field_fingerprint(defined) for cid, defined in by_collection.items()}
    for source in list_sources(conn):
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
