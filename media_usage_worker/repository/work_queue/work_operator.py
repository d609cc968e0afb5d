"""The work rows as an operator sees them: a newest-first listing and ``work retry``.

A retry reopens failed, retrying or abandoned work now. Each step is a guarded compare-and-set
on what was observed, so a retry that races a worker or a capture reports what the row became
instead of overwriting it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain import validation as check
from media_usage_worker.domain.cursor import decode_cursor, encode_cursor, work_scope
from media_usage_worker.domain.vocabulary import CoverageStatus, RetryOutcome, WorkState
from media_usage_worker.domain.work import (
    OperatorRetryResult,
    OperatorWorkItem,
    Page,
    operator_order,
)
from media_usage_worker.repository.base.clock import db_now, lease_is_live
from media_usage_worker.repository.base.db import Bind, read_transaction, transaction
from media_usage_worker.repository.base.predicates import (
    active_status_row,
    lease_expired,
    registered,
)
from media_usage_worker.repository.base.schema import collections, index_status, sources, work
from media_usage_worker.repository.base.upsert import insert_factory
from media_usage_worker.repository.registry.content_tables import content_table_name, scope_columns
from media_usage_worker.repository.work_queue.work_rows import (
    current_identity,
    new_pending_columns,
    reset_to_pending,
    text,
    to_record,
)

_w = work.c

_st = index_status.c


def _operator_item(row: sa.Row[Any]) -> OperatorWorkItem:
    return OperatorWorkItem.from_record(to_record(row))


def find_operator_page(
    bind: Bind,
    *,
    collection_slug: str,
    state: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Page | None:
    """A newest-first page of the collection's work, or ``None`` for an unknown collection."""
    check.identifier(collection_slug, "Media usage work listing requires a collection slug.")
    wanted = check.work_state(state)
    page_limit = check.operator_limit(limit)
    scope = work_scope(collection_slug, wanted)
    position = decode_cursor(cursor, scope=scope)

    with read_transaction(bind) as conn:
        collection = conn.execute(
            sa.select(collections.c.id, collections.c.slug).where(
                collections.c.slug == collection_slug
            )
        ).first()
        if collection is None:
            return None
        candidates: list[OperatorWorkItem] = []
        for one_state in [wanted] if wanted else list(WorkState):
            query = (
                sa.select(work)
                .join(collections, current_identity)
                .where(
                    _w.collection_id == collection.id,
                    _w.collection_slug == collection.slug,
                    _w.state == one_state,
                )
                .order_by(_w.updated_at.desc(), _w.content_id.desc())
                .limit(page_limit + 1)
            )
            if position is not None:
                # Keyset: strictly after the cursor in (updated_at, content_id) desc order.
                query = query.where(
                    sa.or_(
                        _w.updated_at < position.order_value,
                        sa.and_(
                            _w.updated_at == position.order_value,
                            _w.content_id < position.id,
                        ),
                    )
                )
            candidates.extend(_operator_item(row) for row in conn.execute(query))

    ordered = sorted(candidates, key=operator_order, reverse=True)
    items = ordered[:page_limit]
    next_cursor = None
    if len(ordered) > page_limit and items:
        next_cursor = encode_cursor(items[-1].updated_at, items[-1].content_id, scope=scope)
    return Page(items=items, next_cursor=next_cursor)


def retry_operator_work(bind: Bind, *, collection_id: str, content_id: str) -> OperatorRetryResult:
    """Reopen failed, retrying or abandoned work now; each step is a guarded CAS."""
    collection_id, content_id = check.identity(collection_id, content_id)
    slug = _active_operator_collection(bind, collection_id)
    if slug is None:
        return OperatorRetryResult(RetryOutcome.COLLECTION_NOT_FOUND)

    # No content row is required: a retry is how an operator makes the worker reconcile an entry
    # whose content is already gone (emdash's contract). A friendlier answer for a mistyped id
    # belongs to the CLI and HTTP, which ask ``entry_is_known`` first.
    observed = _find_by_identity(bind, collection_id, content_id)
    if (
        observed is not None
        and observed.state == WorkState.PENDING
        and observed.collection_slug == slug
    ):
        return OperatorRetryResult(
            RetryOutcome.PENDING, changed=False, work=_operator_item(observed)
        )

    epoch = _invalidate_coverage_for_operator_retry(bind, collection_id, slug, content_id, observed)
    if epoch is None:
        return _operator_retry_lost(bind, collection_id, content_id)
    if observed is not None:
        reopened = _reopen_observed_work(bind, observed, slug, epoch)
    else:
        reopened = _create_operator_work(bind, collection_id, slug, content_id, epoch)
    if reopened is not None:
        return OperatorRetryResult(
            RetryOutcome.PENDING, changed=True, work=_operator_item(reopened)
        )
    return _operator_retry_lost(bind, collection_id, content_id)


def _active_operator_collection(bind: Bind, collection_id: str) -> str | None:
    with transaction(bind) as conn:
        slug: str | None = conn.execute(
            sa.select(collections.c.slug).where(
                collections.c.id == collection_id,
                *active_status_row(collections.c.id, collections.c.slug),
            )
        ).scalar_one_or_none()
    return slug


def retry_refusal(bind: Bind, *, collection_id: str, content_id: str) -> RetryOutcome | None:
    """Why a careful retry should not queue this entry, or ``None`` when it may.

    ``collection_not_found`` when the collection is not registered with active capture;
    ``content_not_found`` when the entry has no work row, no rows in the index and no content
    row (most likely a mistyped id). Only the CLI and HTTP ask, before ``retry_operator_work``,
    which itself requires none of this. The content table is read only where it exists: a
    registered collection's table may be gone (a deletion in progress, a host that dropped it),
    which is an answer ("not there"), not an error.
    """
    collection_id, content_id = check.identity(collection_id, content_id)
    with read_transaction(bind) as conn:
        slug = conn.execute(
            sa.select(collections.c.slug).where(
                collections.c.id == collection_id,
                *active_status_row(collections.c.id, collections.c.slug),
            )
        ).scalar_one_or_none()
        if slug is None:
            return RetryOutcome.COLLECTION_NOT_FOUND
        in_work = conn.execute(
            sa.select(1)
            .where(_w.collection_id == collection_id, _w.content_id == content_id)
            .limit(1)
        ).first()
        in_index = conn.execute(
            sa.select(1)
            .where(
                sources.c.collection_id == collection_id,
                sources.c.content_id == content_id,
            )
            .limit(1)
        ).first()
        if in_work is not None or in_index is not None:
            return None
        in_content = None
        if sa.inspect(conn).has_table(content_table_name(slug)):
            entry = scope_columns(slug)
            in_content = conn.execute(
                sa.select(1).select_from(entry).where(entry.c.id == content_id).limit(1)
            ).first()
    return None if in_content is not None else RetryOutcome.CONTENT_NOT_FOUND


def _find_by_identity(bind: Bind, collection_id: str, content_id: str) -> sa.Row[Any] | None:
    with transaction(bind) as conn:
        return conn.execute(
            sa.select(work).where(_w.collection_id == collection_id, _w.content_id == content_id)
        ).first()


def _invalidate_coverage_for_operator_retry(
    bind: Bind, collection_id: str, slug: str, content_id: str, observed: sa.Row[Any] | None
) -> int | None:
    """Bump the epoch (complete → stale), but only if the work row is still as observed."""
    row_of_entry = sa.and_(_w.collection_id == _st.collection_id, _w.content_id == content_id)
    if observed is not None:
        still_observed = [
            row_of_entry,
            _w.work_version == observed.work_version,
            _w.state == observed.state,
        ]
        if observed.state == WorkState.LEASED:
            still_observed.append(lease_expired(_w.lease_expires_at))
        work_guard: sa.ColumnElement[bool] = sa.exists(sa.select(1).where(*still_observed))
    else:
        work_guard = ~sa.exists(sa.select(1).where(row_of_entry))
    was_complete = _st.status == CoverageStatus.COMPLETE
    statement = (
        index_status.update()
        .where(
            *active_status_row(collection_id, slug),
            registered(_st.collection_id, _st.scope_key),
            work_guard,
        )
        .values(
            change_epoch=_st.change_epoch + 1,
            status=sa.case((was_complete, CoverageStatus.STALE.value), else_=_st.status),
            completed_at=sa.case((was_complete, sa.null()), else_=_st.completed_at),
            updated_at=db_now(),
        )
        .returning(_st.change_epoch)
    )
    with transaction(bind) as conn:
        epoch = conn.execute(statement).scalar_one_or_none()
    return None if epoch is None else int(epoch)


def _reopen_observed_work(
    bind: Bind, observed: sa.Row[Any], slug: str, epoch: int
) -> sa.Row[Any] | None:
    guards = [
        _w.collection_id == observed.collection_id,
        _w.content_id == observed.content_id,
        _w.work_version == observed.work_version,
        _w.state == observed.state,
        registered(observed.collection_id, slug),
        sa.exists(
            sa.select(1).where(
                *active_status_row(observed.collection_id, slug), _st.change_epoch == epoch
            )
        ),
    ]
    if observed.state == WorkState.LEASED:
        guards.append(lease_expired(_w.lease_expires_at))
    statement = (
        work.update()
        .where(*guards)
        .values(collection_slug=slug, work_version=_w.work_version + 1, **reset_to_pending(epoch))
        .returning(*work.c)
    )
    with transaction(bind) as conn:
        return conn.execute(statement).first()


def _create_operator_work(
    bind: Bind, collection_id: str, slug: str, content_id: str, epoch: int
) -> sa.Row[Any] | None:
    source = sa.select(
        *new_pending_columns(text(collection_id), text(slug), text(content_id), _st.change_epoch)
    ).where(
        *active_status_row(collection_id, slug),
        registered(collection_id, slug),
        _st.change_epoch == epoch,
    )
    statement = (
        insert_factory(bind)(work)
        .from_select([c.name for c in work.c], source)
        .on_conflict_do_nothing(index_elements=[_w.collection_id, _w.content_id])
        .returning(*work.c)
    )
    with transaction(bind) as conn:
        return conn.execute(statement).first()


def _operator_retry_lost(bind: Bind, collection_id: str, content_id: str) -> OperatorRetryResult:
    """After a lost race, report what the row is now."""
    if _active_operator_collection(bind, collection_id) is None:
        return OperatorRetryResult(RetryOutcome.COLLECTION_NOT_FOUND)
    current = _find_by_identity(bind, collection_id, content_id)
    if current is not None and current.state == WorkState.PENDING:
        return OperatorRetryResult(
            RetryOutcome.PENDING, changed=False, work=_operator_item(current)
        )
    with transaction(bind) as conn:
        live_expiry = conn.execute(
            sa.select(_w.lease_expires_at).where(
                _w.collection_id == collection_id,
                _w.content_id == content_id,
                _w.state == WorkState.LEASED,
                _w.lease_expires_at.isnot(None),
                lease_is_live(_w.lease_expires_at),
            )
        ).scalar_one_or_none()
    if live_expiry is not None:
        return OperatorRetryResult(RetryOutcome.LEASE_ACTIVE, lease_expires_at=live_expiry)
    return OperatorRetryResult(RetryOutcome.CONFLICT)
