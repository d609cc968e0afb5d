"""The rules each collection's index was computed under (docs/design.md §5, "Rules").

``complete`` coverage holds only while a collection's index was computed under the running
rules (``domain.rules``). A run that makes coverage ``complete`` records its rules in the same
transaction (``record_indexed_rules``); ``mark_rules_changed`` takes every collection indexed
under other rules out of ``complete`` in one guarded statement, and reconciliation re-indexes
it; ``rules_current`` is the guard that keeps a worker of other rules from restoring it.

The statements that change the site's declared rules (reference paths, media URL prefixes) are
here too; ``pipeline.registry`` makes each change one transaction that stores it, counts a new
rules revision and takes the collections it touches out of ``complete`` (their epoch moves, so
a run in progress restarts under them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.errors import CollectionNotFound
from media_usage_worker.domain.host_sources import HostSource
from media_usage_worker.domain.reference_paths import ReferencePath
from media_usage_worker.domain.rules import RulesState
from media_usage_worker.domain.vocabulary import CaptureState, CoverageStatus, ErrorCode
from media_usage_worker.repository.base.clock import db_now
from media_usage_worker.repository.base.db import Bind, read_transaction, transaction
from media_usage_worker.repository.base.schema import (
    ADAPTER_ID,
    SCOPE_TYPE,
    collections,
    fields,
    host_sources,
    index_status,
    media_url_prefixes,
    reference_paths,
    rules_state,
)
from media_usage_worker.repository.base.upsert import insert_factory_for
from media_usage_worker.repository.registry.collections import (
    Collection,
    collection_by_slug,
    invalidate_coverage,
)
from media_usage_worker.repository.registry.field_registry import current_fingerprints
from media_usage_worker.repository.registry.rules_state import record_indexed_rules, rules_current

# The flows (noqa F822) are in ``pipeline.registry`` now, looked up by ``__getattr__`` below;
# ``record_indexed_rules`` and ``rules_current`` are defined in ``rules_state``.
__all__ = [
    "DeclaredRules",
    "add_media_url_prefix",  # noqa: F822
    "all_collections_held",
    "collection_held",
    "count_other_reference_paths",
    "count_rules_change",
    "declare_reference_path",  # noqa: F822
    "delete_media_url_prefix",
    "delete_reference_path",
    "field_exists",
    "insert_media_url_prefix",
    "insert_reference_path",
    "mark_rules_changed",
    "read_declared_rules",
    "read_media_url_prefixes",
    "read_rules_states",
    "record_indexed_rules",
    "remove_media_url_prefix",  # noqa: F822
    "remove_reference_path",  # noqa: F822
    "rules_current",
]
_rs = rules_state.c
_st = index_status.c
_rp = reference_paths.c


# Coverage that a collection could keep or get back without a run, while its index was
# computed under other rules: it becomes ``stale`` and needs reconciling. A run in progress is
# left alone (its fingerprint restarts it under the running rules).
_MARK_RULES_CHANGED = (
    index_status.update()
    .where(
        _st.adapter_id == ADAPTER_ID,
        _st.scope_type == SCOPE_TYPE,
        _st.capture_state == CaptureState.ACTIVE,
        _st.reconciliation_required == 0,
        _st.status.in_((CoverageStatus.COMPLETE, CoverageStatus.STALE, CoverageStatus.PARTIAL)),
        ~rules_current(_st.collection_id),
    )
    .values(
        status=CoverageStatus.STALE,
        completed_at=None,
        last_error_code=ErrorCode.RULES_CHANGED,
        reconciliation_required=1,
        updated_at=db_now(),
    )
    .returning(_st.scope_key)
)


def mark_rules_changed(bind: Bind) -> list[str]:
    """Take every collection indexed under other rules out of ``complete``; their slugs."""
    with transaction(bind) as conn:
        return sorted(conn.execute(_MARK_RULES_CHANGED).scalars())


def read_rules_states(
    conn: sa.Connection, sources: Sequence[HostSource] | None = None
) -> dict[str, RulesState]:
    """The rules state of every registered collection and source, and of every recorded one,
    by collection id, with the fingerprint of its fields in the registry now (``None``: not
    registered any more). One registered but never recorded has ``RulesState()``'s record:
    never current. ``sources``: the registered sources, when the caller has read them."""
    fingerprints = current_fingerprints(conn, sources)
    rows = conn.execute(
        sa.select(
            _rs.collection_id, _rs.rules_revision, _rs.indexed_extraction_version,
            _rs.indexed_rules_revision, _rs.indexed_fields, _rs.last_complete_at,
        )
    )  # fmt: skip
    states = {cid: RulesState(current_fields=fp) for cid, fp in fingerprints.items()}
    states.update({
        row[0]: RulesState(*row[1:5], fingerprints.get(row[0]), row[5]) for row in rows
    })  # fmt: skip
    return states


_SETTLED_SCOPES = sa.select(_st.collection_id, _st.scope_key).where(
    _st.adapter_id == ADAPTER_ID,
    _st.scope_type == SCOPE_TYPE,
    _st.capture_state == CaptureState.ACTIVE,
    _st.reconciliation_required == 0,
)


def _fields_changed(conn: sa.Connection) -> list[tuple[str, str]]:
    """(collection id, slug) of each registered scope with nothing to reconcile, indexed under
    the running rules but with other fields than the registry has now."""
    states = read_rules_states(conn)
    changed = []
    for collection_id, slug in conn.execute(_SETTLED_SCOPES).all():
        state = states.get(collection_id)
        if state is None or state.current_fields is None:  # not registered any more
            continue
        if state.rules_current and not state.fields_current:
            changed.append((collection_id, slug))
    return changed


def mark_fields_changed(bind: Bind) -> list[str]:
    """Take every collection whose fields changed since it was indexed (by the CMS itself,
    without this project's API) out of ``complete``, as a field added here does: a new epoch,
    ``stale``, reconciliation required. Its slugs. Every reconcile tick asks, so the question
    is read first and a write transaction is taken only for an answer to act on."""
    with read_transaction(bind) as conn:
        if not _fields_changed(conn):
            return []
    with transaction(bind) as conn:
        changed = _fields_changed(conn)
        for collection_id, slug in changed:
            invalidate_coverage(conn, Collection(collection_id, slug, slug), ErrorCode.STALE)
    return sorted(slug for _, slug in changed)


# --- the site's declared rules ---------------------------------------------------------------


@dataclass(frozen=True)
class DeclaredRules:
    """Every declared reference path (collection slug, path) and media URL prefix."""

    reference_paths: list[tuple[str, str]]
    media_url_prefixes: list[str]


def field_exists(conn: sa.Connection, collection_id: str, field_slug: str) -> bool:
    found = sa.select(1).where(fields.c.collection_id == collection_id, fields.c.slug == field_slug)
    return conn.execute(found).first() is not None


def count_other_reference_paths(conn: sa.Connection, collection_id: str, path_text: str) -> int:
    """How many paths the collection declares besides ``path_text``."""
    return conn.execute(
        sa.select(sa.func.count()).where(_rp.collection_id == collection_id, _rp.path != path_text)
    ).scalar_one()


def insert_reference_path(conn: sa.Connection, collection_id: str, path: ReferencePath) -> bool:
    """Store the path; ``False`` when it was there already."""
    inserted = conn.execute(
        insert_factory_for(conn.dialect.name)(reference_paths)
        .values(collection_id=collection_id, path=path.text, field_slug=path.field_slug)
        .on_conflict_do_nothing(index_elements=[_rp.collection_id, _rp.path])
        .returning(_rp.path)
    ).first()
    return inserted is not None


def delete_reference_path(conn: sa.Connection, collection_id: str, path_text: str) -> bool:
    """``False`` when the collection declares no such path."""
    removed = conn.execute(
        reference_paths.delete()
        .where(_rp.collection_id == collection_id, _rp.path == path_text)
        .returning(_rp.path)
    ).first()
    return removed is not None


def insert_media_url_prefix(conn: sa.Connection, prefix: str) -> bool:
    """Store the prefix; ``False`` when it was there already."""
    prefixes = media_url_prefixes.c
    inserted = conn.execute(
        insert_factory_for(conn.dialect.name)(media_url_prefixes)
        .values(prefix=prefix)
        .on_conflict_do_nothing(index_elements=[prefixes.prefix])
        .returning(prefixes.prefix)
    ).first()
    return inserted is not None


def delete_media_url_prefix(conn: sa.Connection, prefix: str) -> bool:
    """``False`` when no such prefix is declared."""
    prefixes = media_url_prefixes.c
    removed = conn.execute(
        media_url_prefixes.delete().where(prefixes.prefix == prefix).returning(prefixes.prefix)
    ).first()
    return removed is not None


def read_declared_rules(bind: Bind) -> DeclaredRules:
    with read_transaction(bind) as conn:
        paths = conn.execute(
            sa.select(collections.c.slug, _rp.path)
            .join(collections, collections.c.id == _rp.collection_id)
            .order_by(collections.c.slug, _rp.path)
        ).all()
        return DeclaredRules([(slug, path) for slug, path in paths], read_media_url_prefixes(conn))


def read_media_url_prefixes(conn: sa.Connection) -> list[str]:
    statement = sa.select(media_url_prefixes.c.prefix).order_by(media_url_prefixes.c.prefix)
    return list(conn.execute(statement).scalars())


# FOR SHARE (PostgreSQL; SQLite's writers are serialised anyway): a collection deletion that
# has not yet dropped the registry row waits for this change to commit, then removes the rules
# rows it wrote; one that already dropped it is not seen. Either way no rules row outlives its
# collection.
def all_collections_held(conn: sa.Connection) -> list[Collection]:
    """Every collection, and every source beyond content (a media URL can be anywhere)."""
    statement = sa.select(collections.c.id, collections.c.slug, collections.c.label)
    rows = conn.execute(statement.with_for_update(read=True))
    h = host_sources.c
    sources = conn.execute(
        sa.select(h.collection_id, h.scope_key, h.kind).with_for_update(read=True)
    )
    return [Collection(*row) for row in rows] + [Collection(*row) for row in sources]


def collection_held(conn: sa.Connection, slug: str) -> Collection:
    """``collection_by_slug``, with the registry row held as ``all_collections_held`` holds it."""
    collection = collection_by_slug(conn, slug)
    held = conn.execute(
        sa.select(collections.c.id)
        .where(collections.c.id == collection.id)
        .with_for_update(read=True)
    ).first()
    if held is None:
        raise CollectionNotFound(f"No collection has slug {slug!r}.")
    return collection


def count_rules_change(conn: sa.Connection, changed: list[Collection]) -> None:
    """A new rules revision for each collection, and its coverage out of ``complete``."""
    for collection in changed:
        insert = insert_factory_for(conn.dialect.name)(rules_state).values(
            collection_id=collection.id, rules_revision=1, updated_at=db_now()
        )
        conn.execute(
            insert.on_conflict_do_update(
                index_elements=[_rs.collection_id],
                set_={"rules_revision": _rs.rules_revision + 1, "updated_at": db_now()},
            )
        )
        invalidate_coverage(conn, collection, ErrorCode.RULES_CHANGED)


# The flows made of these statements moved up to ``pipeline.registry``; their names stay
# importable from here (looked up on first use, so this module imports nothing above the data
# layer).
_FLOWS = frozenset(
    {"declare_reference_path", "remove_reference_path", "add_media_url_prefix",
     "remove_media_url_prefix"}
)  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in _FLOWS:
        from media_usage_worker.pipeline import registry

        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
