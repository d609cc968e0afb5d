"""The predicates every guard is built from, each defined once so no guard drifts from another.

"This (id, slug) is the registered collection", "this is the collection's status row (with
capture on)", "this row is due or its lease expired" and "this lease still holds its row"
(docs/design.md §3).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.vocabulary import ActivationState, CaptureState, WorkState
from media_usage_worker.domain.work import Lease
from media_usage_worker.repository.base.clock import is_due, lease_is_live
from media_usage_worker.repository.base.schema import (
    ADAPTER_ID,
    CAPTURE_TASK_KEY,
    SCOPE_TYPE,
    activation,
    collection_deletions,
    collections,
    host_sources,
    index_status,
    work,
)

_st = index_status.c
_w = work.c


def registered(collection_id: Any, slug: Any) -> sa.ColumnElement[bool]:
    """True while ``_emdash_collections`` holds exactly this id with exactly this slug, or
    the registry of sources beyond content holds this source's identity (the two never share
    one: ``domain.host_sources``)."""
    return sa.or_(
        sa.exists(
            sa.select(1).where(collections.c.id == collection_id, collections.c.slug == slug)
        ),
        sa.exists(
            sa.select(1).where(
                host_sources.c.collection_id == collection_id,
                host_sources.c.scope_key == slug,
            )
        ),
    )


def status_row(collection_id: Any, slug: Any) -> list[sa.ColumnElement[bool]]:
    """The collection's ``content-media`` status row, matched on both id and slug."""
    return [
        _st.adapter_id == ADAPTER_ID,
        _st.scope_type == SCOPE_TYPE,
        _st.collection_id == collection_id,
        _st.scope_key == slug,
    ]


def active_status_row(collection_id: Any, slug: Any) -> list[sa.ColumnElement[bool]]:
    """The collection's status row while its capture is active."""
    return [*status_row(collection_id, slug), _st.capture_state == CaptureState.ACTIVE]


def capture_activated() -> sa.Exists:
    """True while the global capture switch is on."""
    return sa.exists(
        sa.select(1).where(
            activation.c.task_key == CAPTURE_TASK_KEY,
            activation.c.state == ActivationState.ACTIVE,
        )
    )


def being_deleted(collection_id: Any) -> sa.Exists:
    """True while a deletion tombstone stands for this collection id."""
    return sa.exists(sa.select(1).where(collection_deletions.c.collection_id == collection_id))


def due_or_expired(table: sa.Table) -> sa.ColumnElement[bool]:
    """A row a claimer may take: due pending or retry work, or a lease whose holder is gone.

    The work and the reconciliation tables share these columns and this rule.
    """
    c = table.c
    state = checked_only(c.state)
    return sa.or_(
        sa.and_(state.in_((WorkState.PENDING, WorkState.RETRY)), is_due(c.next_attempt_at)),
        sa.and_(state == WorkState.LEASED, lease_expired(c.lease_expires_at)),
    )


def checked_only(column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
    """``column`` as a check on rows a statement finds by their key, never as an index search.

    The claim and lease guards name their rows by key. Left bare, their state test lets
    PostgreSQL, when its statistics predate a large enqueue, search the (collection, state, …)
    index instead and walk every row of that state in the collection: the whole backlog, for
    every claim. ``state || ''`` is the same value, and no index covers it.
    """
    return column.concat("")


def lease_expired(column: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    return sa.and_(column.isnot(None), is_due(column))


def lease_held(lease: Lease) -> sa.Exists:
    """True while this exact lease still holds its row: fences writes of a stale holder."""
    return lease_held_by(
        lease.collection_id, lease.content_id, lease.work_version, lease.lease_token
    )


def lease_held_by(collection_id: Any, content_id: Any, work_version: Any, token: Any) -> sa.Exists:
    """``lease_held`` of a lease given as values or columns (a row set's, say)."""
    return sa.exists(
        sa.select(1).where(
            _w.collection_id == collection_id,
            _w.content_id == content_id,
            _w.work_version == work_version,
            *lease_holds_row(token),
        )
    )


def lease_holds_row(token: Any) -> list[sa.ColumnElement[bool]]:
    """The work row (found by its key and version) is leased under ``token``, unexpired."""
    return [
        checked_only(_w.state) == WorkState.LEASED,
        _w.lease_token == token,
        lease_is_live(_w.lease_expires_at),
    ]
