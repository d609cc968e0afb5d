"""Coverage status transitions driven by incremental work (docs/design.md §5)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.vocabulary import CaptureState, CoverageStatus, WorkState
from media_usage_worker.repository.base.clock import db_now
from media_usage_worker.repository.base.db import Bind, transaction
from media_usage_worker.repository.base.predicates import active_status_row, registered, status_row
from media_usage_worker.repository.base.schema import (
    ADAPTER_ID,
    SCOPE_TYPE,
    index_status,
    reconciliations,
    work,
)
from media_usage_worker.repository.registry.rules import rules_current
from media_usage_worker.repository.registry.rules_state import note_complete

_st = index_status.c


def _active_status(collection_id: object, slug: object) -> list[sa.ColumnElement[bool]]:
    return [*active_status_row(collection_id, slug), registered(collection_id, slug)]


# The success timestamp is only rewritten when a second old, so completions do not all queue on
# the status row's lock.
_success_note_due = sa.or_(
    _st.last_incremental_success_at.is_(None), _st.last_incremental_success_at < db_now(-1)
)
_collection = sa.bindparam("p_collection_id", type_=sa.Text)
_slug = sa.bindparam("p_slug", type_=sa.Text)


def _restorable_for(collection_id: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """``complete`` may come back: nothing to reconcile, no work row left, and the index was
    computed under this worker's rules (one of other rules never restores it)."""
    work_remains = sa.exists(sa.select(1).where(work.c.collection_id == collection_id))
    return sa.and_(
        _st.reconciliation_required == 0,
        _st.status.in_((CoverageStatus.STALE, CoverageStatus.PARTIAL)),
        ~work_remains,
        rules_current(collection_id),
    )


_restorable = _restorable_for(_collection)
# Built once (this runs after every completed item); values are bound parameters only.
_READ_STATUS = sa.select(
    _st.change_epoch,
    _restorable.label("restorable"),
    _success_note_due.label("note_due"),
).where(*_active_status(_collection, _slug))
# SKIP LOCKED: a row locked by a writer's open transaction is left for a later tick, so neither
# a worker nor the tick waits on a host transaction (SQLite ignores it; BEGIN IMMEDIATE
# serialises there).
_READ_SETTLED = _READ_STATUS.with_for_update(skip_locked=True)
_NOTE_SUCCESS = (
    index_status.update()
    .where(*_active_status(_collection, _slug), _success_note_due)
    .values(last_incremental_success_at=db_now(), updated_at=db_now())
)
# CAS on the epoch read before: a capture that committed since then (and whose work row this
# statement's snapshot might not see) has moved the epoch, so nothing is marked complete.
_RESTORE_COMPLETE = (
    index_status.update()
    .where(
        *_active_status(_collection, _slug),
        _st.change_epoch == sa.bindparam("p_epoch", type_=sa.BigInteger),
    )
    .values(
        status=sa.case((_restorable, CoverageStatus.COMPLETE.value), else_=_st.status),
        completed_at=sa.case((_restorable, db_now()), else_=_st.completed_at),
        last_error_code=sa.case((_restorable, sa.null()), else_=_st.last_error_code),
        last_incremental_success_at=db_now(),
        updated_at=db_now(),
    )
)


def record_incremental_success(bind: Bind, collection_id: str, slug: str) -> None:
    """Note the success; restore ``complete`` only when nothing is pending or being reconciled.

    Must run after the completing transaction committed (see the processor): each completion
    then reads after its own deletion committed, so of the last two completions of a collection
    the later reader sees both rows gone and restores ``complete``. While other work remains
    nothing is restorable, and only the throttled timestamp moves.
    """
    params = {"p_collection_id": collection_id, "p_slug": slug}
    with transaction(bind) as conn:
        # A host's open transaction on the collection holds its status row (the capture
        # trigger bumps the epoch there). Waiting for it would stall this worker, and with it
        # every other collection's work; the note is skipped instead, and the tick's
        # restore_settled_coverage restores ``complete`` once the row is free.
        current = conn.execute(_READ_SETTLED, params).first()
        if current is None:
            return
        epoch, restorable, note_due = current
        if restorable:
            restored = conn.execute(_RESTORE_COMPLETE, {**params, "p_epoch": epoch})
            if restored.rowcount:
                note_complete(conn, [collection_id])
        elif note_due:
            conn.execute(_NOTE_SUCCESS, params)


# Collections a lost note can leave behind: stale or partial, nothing to reconcile, no work.
_SETTLED_CANDIDATES = sa.select(_st.collection_id, _st.scope_key).where(
    _st.adapter_id == ADAPTER_ID,
    _st.scope_type == SCOPE_TYPE,
    _st.capture_state == CaptureState.ACTIVE,
    _restorable_for(_st.collection_id),
)
# The completion note's CAS on the epoch read before, without the note's success timestamp.
_RESTORE_SETTLED = (
    index_status.update()
    .where(
        *_active_status(_collection, _slug),
        _st.change_epoch == sa.bindparam("p_epoch", type_=sa.BigInteger),
        _restorable,
    )
    .values(
        status=CoverageStatus.COMPLETE,
        completed_at=db_now(),
        last_error_code=None,
        updated_at=db_now(),
    )
)


def restore_settled_coverage(bind: Bind) -> list[str]:
    """Restore ``complete`` where a completion's coverage note was lost; returns the slugs.

    The note runs after the completion commits, so a worker killed between the two leaves its
    collection ``stale`` with no work left, and nothing else would restore it until the next
    write. The tick calls this. It is the note's own check and epoch CAS, with the status row
    locked by the read: a capture holding that row is skipped (it is about to make the
    collection stale anyway), and one that committed since the read has moved the epoch.
    """

    def restore(conn: sa.Connection, params: dict[str, str], current: sa.Row[Any]) -> bool:
        if not current.restorable:
            return False
        update = conn.execute(_RESTORE_SETTLED, {**params, "p_epoch": current.change_epoch})
        if update.rowcount:
            note_complete(conn, [params["p_collection_id"]])
        return bool(update.rowcount)

    return _sweep(bind, _SETTLED_CANDIDATES, restore)


def _sweep(
    bind: Bind,
    candidates: sa.Select[Any],
    act: Callable[[sa.Connection, dict[str, str], sa.Row[Any]], bool],
) -> list[str]:
    """The tick's repair of a lost note: for each (collection id, slug) ``candidates`` finds,
    one transaction that locks its status row (``_READ_SETTLED``, skipping a row something
    else holds) and runs ``act``; the slugs where ``act`` changed the row."""
    with transaction(bind) as conn:
        found = conn.execute(candidates).all()
    changed = []
    for collection_id, slug in found:
        params = {"p_collection_id": collection_id, "p_slug": slug}
        with transaction(bind) as conn:
            current = conn.execute(_READ_SETTLED, params).first()
            if current is not None and act(conn, params, current):
                changed.append(slug)
    return changed


# The latest failure's code in a collection: what a lost failure note would have written.
_latest_failure_code = (
    sa.select(work.c.last_error_code)
    .where(work.c.collection_id == _st.collection_id, work.c.state == WorkState.FAILED)
    .order_by(work.c.updated_at.desc(), work.c.content_id)
    .limit(1)
    .scalar_subquery()
)
_failure_unnoted = sa.and_(
    _st.reconciliation_required == 0,
    _st.status.in_((CoverageStatus.STALE, CoverageStatus.COMPLETE)),
    sa.exists(
        sa.select(1).where(
            work.c.collection_id == _st.collection_id, work.c.state == WorkState.FAILED
        )
    ),
    ~sa.exists(
        sa.select(1).where(
            reconciliations.c.collection_id == _st.collection_id,
            reconciliations.c.run_token == _st.cursor,
        )
    ),
)
# Collections whose failure note was lost: a failed item, yet coverage not ``partial``.
_UNNOTED_CANDIDATES = sa.select(_st.collection_id, _st.scope_key).where(
    _st.adapter_id == ADAPTER_ID,
    _st.scope_type == SCOPE_TYPE,
    _st.capture_state == CaptureState.ACTIVE,
    _failure_unnoted,
)
_NOTE_LOST_FAILURE = (
    index_status.update()
    .where(*_active_status(_collection, _slug), _failure_unnoted)
    .values(
        status=CoverageStatus.PARTIAL,
        completed_at=None,
        last_error_code=_latest_failure_code,
        updated_at=db_now(),
    )
)


def note_lost_failures(bind: Bind) -> list[str]:
    """Mark ``partial`` where an item failed for good but its failure note was lost; returns
    the slugs.

    The failure note skips a status row something else holds (a host's transaction, or this
    very tick), so a collection can keep a failed item while its coverage says ``stale``: never
    an unsafe answer (``complete`` cannot come back while the failed row stays), but an
    operator would not see why. The tick calls this, the twin of restore_settled_coverage,
    with the same rule of never waiting on a held row.
    """

    def note(conn: sa.Connection, params: dict[str, str], _: sa.Row[Any]) -> bool:
        return bool(conn.execute(_NOTE_LOST_FAILURE, params).rowcount)

    return _sweep(bind, _UNNOTED_CANDIDATES, note)


def record_incremental_failure(
    bind: Bind,
    collection_id: str,
    slug: str,
    content_id: str,
    work_version: int,
    error_code: str,
) -> None:
    """A failed item makes trusted coverage ``partial`` (or a running repair ``stale``)."""
    w = work.c
    failed_row = sa.exists(
        sa.select(1).where(
            w.collection_id == collection_id,
            w.content_id == content_id,
            w.work_version == work_version,
            w.state == WorkState.FAILED,
            w.last_error_code == error_code,
        )
    )
    run_owns_status = sa.exists(
        sa.select(1).where(
            reconciliations.c.collection_id == collection_id,
            reconciliations.c.run_token == _st.cursor,
        )
    )
    to_partial = sa.and_(~run_owns_status, _st.reconciliation_required == 0)
    to_stale = sa.and_(
        ~run_owns_status, _st.reconciliation_required != 0, _st.status == CoverageStatus.RUNNING
    )
    with transaction(bind) as conn:
        # As for a success note: never wait on a host's transaction. A skipped failure note
        # cannot let ``complete`` back: the failed work row stays until an operator acts.
        free = conn.execute(
            sa.select(_st.scope_key)
            .where(*status_row(collection_id, slug))
            .with_for_update(skip_locked=True)
        ).first()
        if free is None:
            return
        conn.execute(
            index_status.update()
            .where(
                *status_row(collection_id, slug),
                registered(collection_id, slug),
                failed_row,
            )
            .values(
                status=sa.case(
                    (to_partial, CoverageStatus.PARTIAL.value),
                    (to_stale, CoverageStatus.STALE.value),
                    else_=_st.status,
                ),
                completed_at=sa.case(
                    (sa.or_(to_partial, to_stale), sa.null()), else_=_st.completed_at
                ),
                cursor=sa.case((to_stale, sa.null()), else_=_st.cursor),
                last_error_code=error_code,
                updated_at=db_now(),
            )
        )
