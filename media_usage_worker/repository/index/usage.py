"""The read side (docs/design.md §11): where is a media item used, and can we trust "nowhere"?"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain import coverage as coverage_rules
from media_usage_worker.domain import validation as check
from media_usage_worker.domain.cursor import SLUG_ORDER, decode_cursor, encode_cursor, usage_scope
from media_usage_worker.domain.host_sources import Scope
from media_usage_worker.domain.rules import RulesState
from media_usage_worker.domain.vocabulary import CoverageStatus
from media_usage_worker.repository.base.db import Bind, read_transaction
from media_usage_worker.repository.base.predicates import being_deleted
from media_usage_worker.repository.base.schema import (
    ADAPTER_ID,
    SCOPE_TYPE,
    index_status,
    media,
    occurrences,
    sources,
)
from media_usage_worker.repository.lifecycle.activation import is_activation_active
from media_usage_worker.repository.registry.host_sources import SCOPES, built_in_gaps, list_sources
from media_usage_worker.repository.registry.rules import read_rules_states

_s = sources.c
_o = occurrences.c
c = SCOPES.c
VARIANTS = ("columns", "draft_overlay")


@dataclass(frozen=True)
class ScopeCoverage:
    collection_slug: str
    status: str
    # The extraction rules the collection's index was computed under (``None``: unknown); a
    # ``complete`` status holds only under the running rules (docs/design.md §5, "Rules").
    rules: str | None = None
    # ``content`` for a collection; ``settings``, ``user``, ``byline`` or ``table:<name>`` for a
    # source beyond content, whose ``collection_slug`` is its scope key (domain.host_sources).
    kind: str = "content"
    # Why a built-in source is not indexed as its table is now (its table or columns are not
    # in the shape it reads); ``None`` otherwise.
    reason: str | None = None


@dataclass(frozen=True)
class Coverage:
    status: str
    scopes: list[ScopeCoverage]

    @property
    def complete(self) -> bool:
        return self.status == CoverageStatus.COMPLETE


@dataclass(frozen=True)
class UsageEntry:
    collection: str
    content_id: str
    title: str | None
    slug: str | None
    locale: str | None
    status: str | None
    scheduled_at: str | None
    deleted_at: str | None
    sources: list[dict[str, Any]] = field(default_factory=list)
    # Where the use is: ``content`` (an entry of ``collection``), ``settings`` (a settings key),
    # ``user``, ``byline`` or ``table:<name>`` (a row of a declared table), the row's key then
    # in ``content_id`` and the source's scope key in ``collection``.
    kind: str = "content"


@dataclass(frozen=True)
class UsagePage:
    media_id: str
    coverage: Coverage
    entries: list[UsageEntry]
    next_cursor: str | None
    # Whether the media library (the ``media`` table) has a row with this id. The answer does
    # not depend on it: a reference to a file no longer in the library is still a use.
    in_library: bool = True


def read_coverage(conn: sa.Connection) -> Coverage:
    rows = conn.execute(
        sa.select(c.slug, c.id, index_status.c.status, index_status.c.reconciliation_required,
                  index_status.c.schema_version)
        .select_from(
            SCOPES.outerjoin(
                index_status,
                sa.and_(
                    index_status.c.adapter_id == ADAPTER_ID,
                    index_status.c.scope_type == SCOPE_TYPE,
                    index_status.c.scope_key == c.slug,
                ),
            )
        )
        .order_by(c.slug)
    ).all()  # fmt: skip
    sources = list_sources(conn)  # read once for the rules and the built-in sources
    states = read_rules_states(conn, sources)
    gaps = {shape.scope_key: (shape, why) for shape, why in built_in_gaps(conn, sources).items()}
    scopes = []
    for slug, collection_id, status, required, schema_version in rows:
        rules = states.get(collection_id, RulesState())
        scope = coverage_rules.scope_status(status, required, schema_version, rules.current)
        reason = gaps.pop(slug)[1] if slug in gaps else None
        scope = coverage_rules.with_gap(scope, reason)
        scopes.append(ScopeCoverage(slug, scope, rules.indexed_under, Scope.of(slug).label, reason))
    for shape, reason in gaps.values():
        scopes.append(
            ScopeCoverage(shape.scope_key, CoverageStatus.NEVER, None, shape.label, reason)
        )
    # The collections first, then the sources beyond content, each in slug order.
    scopes.sort(key=lambda x: (x.kind != "content", x.collection_slug))
    return Coverage(coverage_rules.aggregate([x.status for x in scopes]), scopes)


def _identity(source: Any, collection_id: Any, active: bool) -> sa.ColumnElement[bool]:
    if not active:
        return sa.true()
    return sa.and_(source.collection_id == collection_id, source.identity_version == 1)


def _not_indexed(column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
    """``column``'s value, as an expression no index matches (the column is NOT NULL)."""
    return sa.func.coalesce(column, "")


def _current_eligible(active: bool) -> tuple[sa.FromClause, list[sa.ColumnElement[bool]]]:
    """Sources joined to their current generation, filtered as §17.2 says."""
    draft = sources.alias("draft")
    joined = sources.join(
        occurrences, sa.and_(_o.source_key == _s.source_key, _o.generation == _s.current_generation)
    ).join(SCOPES, c.slug == _s.collection_slug)
    where = [
        # Filters on the source a media id's occurrence leads to, never a way in: wrapped, no
        # index can serve them, so every read of this join starts from the occurrences of the
        # media id (one seek) and reaches each source by its key. Bare, a planner without
        # statistics (SQLite before its first ANALYZE) walked every content source instead.
        _not_indexed(_s.source_type) == "content",
        _s.collection_slug.isnot(None),
        _s.content_id.isnot(None),
        _not_indexed(_s.source_variant).in_(VARIANTS),
        _identity(_s, c.id, active),
        # A collection being deleted stops counting the moment its tombstone is written.
        ~being_deleted(c.id),
        sa.or_(
            _s.source_variant == "draft_overlay",
            _s.content_status == "published",
            ~sa.exists(
                sa.select(1).where(
                    draft.c.source_type == "content",
                    draft.c.collection_slug == _s.collection_slug,
                    draft.c.content_id == _s.content_id,
                    draft.c.source_variant == "draft_overlay",
                    _identity(draft.c, _s.collection_id, active),
                )
            ),
        ),
    ]
    return joined, where


# Ids per statement: few round trips for a thousand ids, and far below any dialect's limit of
# bound values.
COUNT_BATCH = 250


@functools.cache
def _counts_statement(active: bool) -> sa.Select[Any]:
    """Distinct live entries per media id of the ``media_ids`` parameter (expanding), built once
    per capture state."""
    trashed = sources.alias("trashed")
    joined, where = _current_eligible(active)
    entries = (
        sa.select(_o.media_id, _s.collection_slug, _s.content_id)
        .distinct()
        .select_from(joined)
        .where(
            *where,
            _o.media_id.in_(sa.bindparam("media_ids", expanding=True)),
            ~sa.exists(
                sa.select(1).where(
                    # source_type first: with it the three columns of the sources' content
                    # index are all equalities, so the planner seeks that index with or
                    # without statistics (without, SQLite searched the locale index).
                    trashed.c.source_type == "content",
                    trashed.c.collection_slug == _s.collection_slug,
                    trashed.c.content_id == _s.content_id,
                    trashed.c.content_deleted_at.isnot(None),
                    _identity(trashed.c, c.id, active),
                )
            ),
        )
        .subquery()
    )
    return sa.select(entries.c.media_id, sa.func.count()).group_by(entries.c.media_id)


def usage_counts(conn: sa.Connection, media_ids: list[str]) -> dict[str, int]:
    """Distinct live (not trashed) entries using each media id."""
    statement = _counts_statement(is_activation_active(conn))
    counts = dict.fromkeys(media_ids, 0)
    distinct = list(dict.fromkeys(media_ids))
    for start in range(0, len(distinct), COUNT_BATCH):
        batch = distinct[start : start + COUNT_BATCH]
        for media_id, count in conn.execute(statement, {"media_ids": batch}):
            counts[media_id] = count
    return counts


def usage_page(
    engine: sa.Engine, media_id: str, *, limit: int | None = None, cursor: str | None = None
) -> UsagePage:
    """Entries using ``media_id`` (trashed ones included, with ``deleted_at``), by slug and id.

    Any id is answered from the index, as ``usage_count`` answers it, whether or not the media
    library has a row for it (emdash answers NOT_FOUND there; see ``UsagePage.in_library``).
    """
    check.named_identifier("media_id", media_id)
    page_limit = check.operator_limit(limit)
    scope = usage_scope(media_id)
    position = decode_cursor(cursor, SLUG_ORDER, scope=scope)
    with read_transaction(engine) as conn:
        in_library = (
            conn.execute(sa.select(media.c.id).where(media.c.id == media_id)).first() is not None
        )
        active = is_activation_active(conn)
        joined, where = _current_eligible(active)
        groups_query = (
            sa.select(c.id, _s.collection_slug, _s.content_id)
            .distinct()
            .select_from(joined)
            .where(*where, _o.media_id == media_id)
            .order_by(_s.collection_slug, _s.content_id)
            .limit(page_limit + 1)
        )
        if position is not None:
            groups_query = groups_query.where(
                sa.tuple_(_s.collection_slug, _s.content_id)
                > sa.tuple_(sa.literal(position.order_value), sa.literal(position.id))
            )
        groups = conn.execute(groups_query).all()
        has_more = len(groups) > page_limit
        groups = groups[:page_limit]
        entries = [_entry(conn, joined, where, active, media_id, *group) for group in groups]
        result_coverage = read_coverage(conn)
    next_cursor = (
        encode_cursor(groups[-1][1], groups[-1][2], scope=scope) if has_more and groups else None
    )
    return UsagePage(media_id, result_coverage, entries, next_cursor, in_library)


def _entry(
    conn: sa.Connection,
    joined: sa.FromClause,
    where: list[sa.ColumnElement[bool]],
    active: bool,
    media_id: str,
    collection_id: str,
    slug: str,
    content_id: str,
) -> UsageEntry:
    all_sources = conn.execute(
        sa.select(sources).where(
            # The three columns of the sources' content index: a seek, statistics or not.
            _s.source_type == "content",
            _s.collection_slug == slug,
            _s.content_id == content_id,
            _identity(_s, collection_id, active),
        )
    ).all()
    by_variant = {row.source_variant: row for row in all_sources}
    preferred = by_variant.get("draft_overlay") or by_variant.get("columns")
    deleted = max((r.content_deleted_at for r in all_sources if r.content_deleted_at), default=None)
    rows = conn.execute(
        sa.select(_s.source_variant, _s.source_key, _o.field_slug, _o.field_path,
                  _o.occurrence_index, _o.reference_type)
        .select_from(joined)
        .where(*where, _o.media_id == media_id, _s.collection_slug == slug,
               _s.content_id == content_id, c.id == collection_id)
        .order_by(_s.source_variant, _s.source_key, _o.field_path, _o.occurrence_index, _o.id)
    ).all()  # fmt: skip
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(row.source_variant, []).append(
            {
                "field_slug": row.field_slug,
                "field_path": row.field_path,
                "occurrence_index": row.occurrence_index,
                "reference_type": row.reference_type,
            }
        )
    return UsageEntry(
        collection=slug,
        content_id=content_id,
        title=preferred.content_title if preferred else None,
        slug=preferred.content_slug if preferred else None,
        locale=preferred.locale if preferred else None,
        status=preferred.content_status if preferred else None,
        scheduled_at=preferred.content_scheduled_at if preferred else None,
        deleted_at=deleted,
        sources=[{"variant": v, "occurrences": occ} for v, occ in grouped.items()],
        kind=Scope.of(slug).label,
    )


def usage_count(bind: Bind, media_id: str) -> tuple[Coverage, int | None]:
    """The number of live entries using ``media_id``; ``None`` unless coverage is complete."""
    check.named_identifier("media_id", media_id)
    with read_transaction(bind) as conn:
        current = read_coverage(conn)
        count = usage_counts(conn, [media_id])[media_id]
    return current, count if current.complete else None
