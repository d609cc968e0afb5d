"""The rules each collection's index was computed under (docs/design.md §5, "Rules").

``complete`` coverage holds only while a collection's index was computed under the running
rules (``domain.rules``). A run that makes coverage ``complete`` records its rules in the same
transaction (``record_indexed_rules``); ``mark_rules_changed`` takes every collection indexed
under other rules out of ``complete`` in one guarded statement, and reconciliation re-indexes
it; ``rules_current`` is the guard that keeps a worker of other rules from restoring it.

The site's declared rules (reference paths, media URL prefixes) change here too: each change is
one transaction that stores it, counts a new rules revision and takes the collections it
touches out of ``complete`` (their epoch moves, so a run in progress restarts under them).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from media_usage_worker.domain.errors import CollectionNotFound, InvalidRule, RuleNotFound
from media_usage_worker.domain.reference_paths import MAX_PATHS_PER_COLLECTION, ReferencePath
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

__all__ = [
    "DeclaredRules",
    "add_media_url_prefix",
    "declare_reference_path",
    "mark_rules_changed",
    "read_declared_rules",
    "read_media_url_prefixes",
    "read_rules_states",
    # Defined in ``rules_state`` (below this module, for ``activation``); importable here too.
    "record_indexed_rules",
    "remove_media_url_prefix",
    "remove_reference_path",
    "rules_current",
]
r = rules_state.c
st = index_status.c
rp = reference_paths.c


# Coverage that a collection could keep or get back without a run, while its index was
# computed under other rules: it becomes ``stale`` and needs reconciling. A run in progress is
# left alone (its fingerprint restarts it under the running rules).
_MARK_RULES_CHANGED = (
    index_status.update()
    .where(
        st.adapter_id == ADAPTER_ID,
        st.scope_type == SCOPE_TYPE,
        st.capture_state == CaptureState.ACTIVE,
        st.reconciliation_required == 0,
        st.status.in_((CoverageStatus.COMPLETE, CoverageStatus.STALE, CoverageStatus.PARTIAL)),
        ~rules_current(st.collection_id),
    )
    .values(
        status=CoverageStatus.STALE,
        completed_at=None,
        last_error_code=ErrorCode.RULES_CHANGED,
        reconciliation_required=1,
        updated_at=db_now(),
    )
    .returning(st.scope_key)
)


def mark_rules_changed(bind: Bind) -> list[str]:
    """Take every collection indexed under other rules out of ``complete``; their slugs."""
    with transaction(bind) as conn:
        return sorted(conn.execute(_MARK_RULES_CHANGED).scalars())


def read_rules_states(conn: sa.Connection) -> dict[str, RulesState]:
    """The rules state of every registered collection and source, and of every recorded one,
    by collection id, with the fingerprint of its fields in the registry now (``None``: not
    registered any more). One registered but never recorded has ``RulesState()``'s record:
    never current."""
    fingerprints = current_fingerprints(conn)
    rows = conn.execute(
        sa.select(
            r.collection_id, r.rules_revision, r.indexed_extraction_version,
            r.indexed_rules_revision, r.indexed_fields,
        )
    )  # fmt: skip
    states = {cid: RulesState(current_fields=fp) for cid, fp in fingerprints.items()}
    states.update({row[0]: RulesState(*row[1:], fingerprints.get(row[0])) for row in rows})
    return states


_SETTLED_SCOPES = sa.select(st.collection_id, st.scope_key).where(
    st.adapter_id == ADAPTER_ID,
    st.scope_type == SCOPE_TYPE,
    st.capture_state == CaptureState.ACTIVE,
    st.reconciliation_required == 0,
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


def declare_reference_path(bind: Bind, collection_slug: str, path: ReferencePath) -> bool:
    """Store the path; ``False`` when it was already declared (nothing changes then)."""
    with transaction(bind) as conn:
        collection = _locked_collection(conn, collection_slug)
        known = conn.execute(
            sa.select(1).where(
                fields.c.collection_id == collection.id, fields.c.slug == path.field_slug
            )
        ).first()
        if known is None:
            raise InvalidRule(
                f"Reference path {path.text!r}: collection {collection_slug!r} has no field "
                f"{path.field_slug!r}."
            )
        declared = conn.execute(
            sa.select(sa.func.count()).where(
                rp.collection_id == collection.id, rp.path != path.text
            )
        ).scalar_one()
        if declared >= MAX_PATHS_PER_COLLECTION:
            raise InvalidRule(
                f"Collection {collection_slug!r} already declares {declared} reference paths, "
                f"the most one collection may have ({MAX_PATHS_PER_COLLECTION}); remove one "
                "first, or declare a shorter path that reaches several places ([] steps)."
            )
        inserted = conn.execute(
            insert_factory_for(conn.dialect.name)(reference_paths)
            .values(collection_id=collection.id, path=path.text, field_slug=path.field_slug)
            .on_conflict_do_nothing(index_elements=[rp.collection_id, rp.path])
            .returning(rp.path)
        ).first()
        if inserted is not None:
            _rules_changed(conn, [collection])
        return inserted is not None


def remove_reference_path(bind: Bind, collection_slug: str, path_text: str) -> None:
    with transaction(bind) as conn:
        collection = _locked_collection(conn, collection_slug)
        removed = conn.execute(
            reference_paths.delete()
            .where(rp.collection_id == collection.id, rp.path == path_text)
            .returning(rp.path)
        ).first()
        if removed is None:
            raise RuleNotFound(
                f"Collection {collection_slug!r} declares no reference path {path_text!r}."
            )
        _rules_changed(conn, [collection])


def add_media_url_prefix(bind: Bind, prefix: str) -> bool:
    """Store the (validated) prefix; ``False`` when it was already there."""
    with transaction(bind) as conn:
        inserted = conn.execute(
            insert_factory_for(conn.dialect.name)(media_url_prefixes)
            .values(prefix=prefix)
            .on_conflict_do_nothing(index_elements=[media_url_prefixes.c.prefix])
            .returning(media_url_prefixes.c.prefix)
        ).first()
        if inserted is not None:
            _rules_changed(conn, _all_collections(conn))
        return inserted is not None


def remove_media_url_prefix(bind: Bind, prefix: str) -> None:
    with transaction(bind) as conn:
        removed = conn.execute(
            media_url_prefixes.delete()
            .where(media_url_prefixes.c.prefix == prefix)
            .returning(media_url_prefixes.c.prefix)
        ).first()
        if removed is None:
            raise RuleNotFound(f"No media URL prefix {prefix!r} is declared.")
        _rules_changed(conn, _all_collections(conn))


def read_declared_rules(bind: Bind) -> DeclaredRules:
    with read_transaction(bind) as conn:
        paths = conn.execute(
            sa.select(collections.c.slug, rp.path)
            .join(collections, collections.c.id == rp.collection_id)
            .order_by(collections.c.slug, rp.path)
        ).all()
        return DeclaredRules([(slug, path) for slug, path in paths], read_media_url_prefixes(conn))


def read_media_url_prefixes(conn: sa.Connection) -> list[str]:
    statement = sa.select(media_url_prefixes.c.prefix).order_by(media_url_prefixes.c.prefix)
    return list(conn.execute(statement).scalars())


# FOR SHARE (PostgreSQL; SQLite's writers are serialised anyway): a collection deletion that
# has not yet dropped the registry row waits for this change to commit, then removes the rules
# rows it wrote; one that already dropped it is not seen. Either way no rules row outlives its
# collection.
def _all_collections(conn: sa.Connection) -> list[Collection]:
    """Every collection, and every source beyond content (a media URL can be anywhere)."""
    statement = sa.select(collections.c.id, collections.c.slug, collections.c.label)
    rows = conn.execute(statement.with_for_update(read=True))
    h = host_sources.c
    sources = conn.execute(
        sa.select(h.collection_id, h.scope_key, h.kind).with_for_update(read=True)
    )
    return [Collection(*row) for row in rows] + [Collection(*row) for row in sources]


def _locked_collection(conn: sa.Connection, slug: str) -> Collection:
    """``collection_by_slug``, with the registry row held as ``_all_collections`` holds it."""
    collection = collection_by_slug(conn, slug)
    held = conn.execute(
        sa.select(collections.c.id)
        .where(collections.c.id == collection.id)
        .with_for_update(read=True)
    ).first()
    if held is None:
        raise CollectionNotFound(f"No collection has slug {slug!r}.")
    return collection


def _rules_changed(conn: sa.Connection, changed: list[Collection]) -> None:
    """A new rules revision for each collection, and its coverage out of ``complete``."""
    for collection in changed:
        insert = insert_factory_for(conn.dialect.name)(rules_state).values(
            collection_id=collection.id, rules_revision=1, updated_at=db_now()
        )
        conn.execute(
            insert.on_conflict_do_update(
                index_elements=[r.collection_id],
                set_={"rules_revision": r.rules_revision + 1, "updated_at": db_now()},
            )
        )
        invalidate_coverage(conn, collection, ErrorCode.RULES_CHANGED)
