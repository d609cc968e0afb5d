"""Operator overview: coverage, epoch and work backlog per collection (``media-usage status``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import sqlalchemy as sa

from media_usage_worker.domain import coverage as coverage_rules
from media_usage_worker.domain.host_sources import Scope
from media_usage_worker.domain.rules import RulesState
from media_usage_worker.domain.timestamps import seconds_between
from media_usage_worker.domain.vocabulary import CoverageStatus, WorkState
from media_usage_worker.repository.base.clock import db_now, is_due
from media_usage_worker.repository.base.db import Bind, read_transaction
from media_usage_worker.repository.base.schema import (
    ADAPTER_ID,
    SCOPE_TYPE,
    activation,
    index_status,
    occurrences,
    reconciliations,
    sources,
    work,
)
from media_usage_worker.repository.registry.host_sources import SCOPES, built_in_gaps
from media_usage_worker.repository.registry.rules import read_rules_states

_w = work.c
_st = index_status.c
_rc = reconciliations.c
FAILED_SHOWN = 5


@dataclass(frozen=True)
class CollectionStatus:
    slug: str
    id: str
    coverage: str
    status: str | None
    capture_state: str | None
    change_epoch: int
    reconciliation_required: bool
    last_error_code: str | None
    work: dict[str, int] = field(default_factory=dict)
    oldest_due_age_seconds: float | None = None
    failed: list[dict[str, Any]] = field(default_factory=list)
    # The extraction rules the index was computed under, and the running ones.
    rules: dict[str, str | None] = field(default_factory=dict)
    # The collection's reconciliation run, if one exists: its state, phase and attempts.
    reconciliation: dict[str, Any] | None = None
    # ``content`` for a collection; for a source beyond content (``slug`` is then its scope
    # key) ``settings``, ``user``, ``byline`` or ``table:<name>``.
    kind: str = "content"
    # Why a built-in source is not indexed as its table is now (``host_sources.built_in_gaps``).
    reason: str | None = None
    # When its coverage last became complete (``None``: not since this was recorded).
    last_complete_at: str | None = None


class Overview(NamedTuple):
    """What ``overview`` reads (a tuple too, for callers that unpack it)."""

    capture: str
    coverage: str
    scopes: list[CollectionStatus]


_STATUS_ROWS = (
    sa.select(
        SCOPES.c.slug, SCOPES.c.id, _st.status, _st.capture_state, _st.change_epoch,
        _st.reconciliation_required, _st.schema_version, _st.last_error_code,
    )
    .select_from(
        SCOPES.outerjoin(
            index_status,
            sa.and_(
                _st.adapter_id == ADAPTER_ID,
                _st.scope_type == SCOPE_TYPE,
                _st.scope_key == SCOPES.c.slug,
            ),
        )
    )
    .order_by(SCOPES.c.slug)
)  # fmt: skip
_WORK_COUNTS = sa.select(_w.collection_id, _w.state, sa.func.count()).group_by(
    _w.collection_id, _w.state
)
_RUNS = sa.select(_rc.collection_id, _rc.state, _rc.phase, _rc.attempt_count)
_FAILED = (
    sa.select(_w.collection_id, _w.content_id, _w.last_error_code, _w.attempt_count, _w.updated_at)
    .where(_w.state == WorkState.FAILED)
    .order_by(_w.updated_at.desc(), _w.content_id.desc())
)
# Due since: a waiting row's next attempt, or a leased row's expired lease (its worker died or
# is stuck, and the tick sends it again): both are work nobody is doing.
_DUE_SINCE = [
    sa.select(_w.collection_id, sa.func.min(column))
    .where(_w.state.in_(states), is_due(column))
    .group_by(_w.collection_id)
    for column, states in (
        (_w.next_attempt_at, (WorkState.PENDING, WorkState.RETRY)),
        (_w.lease_expires_at, (WorkState.LEASED,)),
    )
]


def overview(bind: Bind) -> Overview:
    """(activation state, aggregate coverage, per-collection details)."""
    with read_transaction(bind) as conn:
        now = conn.execute(sa.select(db_now())).scalar_one()
        capture = conn.execute(sa.select(activation.c.state)).scalar_one_or_none() or "missing"
        rows = conn.execute(_STATUS_ROWS).all()
        rules_states = read_rules_states(conn)
        counts: dict[str, dict[str, int]] = {}
        for collection_id, state, count in conn.execute(_WORK_COUNTS):
            counts.setdefault(collection_id, {})[state] = count
        oldest = _oldest_due(conn)
        runs = {
            row.collection_id: {
                "state": row.state,
                "phase": row.phase,
                "attempts": row.attempt_count,
            }
            for row in conn.execute(_RUNS)
        }
        failed = _failed_items(conn)
        gaps = {shape.scope_key: (shape, why) for shape, why in built_in_gaps(conn).items()}
    details = []
    for row in rows:
        rules = rules_states.get(row.id, RulesState())
        due = oldest.get(row.id)
        reason = gaps.pop(row.slug)[1] if row.slug in gaps else None
        scope = coverage_rules.scope_status(
            row.status, row.reconciliation_required, row.schema_version, rules.current
        )
        details.append(
            CollectionStatus(
                slug=row.slug,
                id=row.id,
                coverage=coverage_rules.with_gap(scope, reason),
                status=row.status,
                capture_state=row.capture_state,
                change_epoch=int(row.change_epoch or 0),
                reconciliation_required=bool(row.reconciliation_required),
                last_error_code=row.last_error_code,
                work={s: counts.get(row.id, {}).get(s, 0) for s in WorkState},
                oldest_due_age_seconds=round(seconds_between(due, now), 3) if due else None,
                failed=failed.get(row.id, []),
                rules={"indexed_under": rules.indexed_under, "running": rules.running},
                last_complete_at=rules.last_complete_at,
                reconciliation=runs.get(row.id),
                kind=Scope.of(row.slug).label,
                reason=reason,
            )
        )
    for shape, reason in gaps.values():
        details.append(
            CollectionStatus(
                slug=shape.scope_key,
                id=shape.collection_id,
                coverage=CoverageStatus.NEVER,
                status=None,
                capture_state=None,
                change_epoch=0,
                reconciliation_required=True,
                last_error_code=None,
                work={s: 0 for s in WorkState},
                kind=shape.label,
                reason=reason,
            )
        )
    aggregate = coverage_rules.aggregate([d.coverage for d in details])
    # The collections first, then the sources beyond content, each in slug order.
    details.sort(key=lambda d: (d.kind != "content", d.slug))
    return Overview(capture, aggregate, details)


def _oldest_due(conn: sa.Connection) -> dict[str, str]:
    """Per collection, since when its oldest due item has waited."""
    oldest: dict[str, str] = {}
    for statement in _DUE_SINCE:
        for collection_id, since in conn.execute(statement):
            if since is not None and (collection_id not in oldest or since < oldest[collection_id]):
                oldest[collection_id] = since
    return oldest


def _failed_items(conn: sa.Connection) -> dict[str, list[dict[str, Any]]]:
    """Per collection, its newest failed items (up to ``FAILED_SHOWN``)."""
    failed: dict[str, list[dict[str, Any]]] = {}
    for item in conn.execute(_FAILED):
        items = failed.setdefault(item.collection_id, [])
        if len(items) < FAILED_SHOWN:
            items.append(
                {
                    "content_id": item.content_id,
                    "error_code": item.last_error_code,
                    "attempts": item.attempt_count,
                    "updated_at": item.updated_at,
                }
            )
    return failed


@dataclass(frozen=True)
class IndexTotals:
    entries: int
    references: int


def index_totals(bind: Bind) -> dict[str, IndexTotals]:
    """Per collection slug: entries with a current source, and their current occurrences."""
    s, o = sources.c, occurrences.c
    with read_transaction(bind) as conn:
        entries: dict[str, int] = dict(
            conn.execute(
                sa.select(s.collection_slug, sa.func.count(sa.distinct(s.content_id))).group_by(
                    s.collection_slug
                )
            ).all()
        )
        references: dict[str, int] = dict(
            conn.execute(
                sa.select(s.collection_slug, sa.func.count())
                .select_from(
                    sources.join(
                        occurrences,
                        sa.and_(o.source_key == s.source_key, o.generation == s.current_generation),
                    )
                )
                .group_by(s.collection_slug)
            ).all()
        )
    return {
        slug: IndexTotals(int(count), int(references.get(slug, 0)))
        for slug, count in entries.items()
    }
