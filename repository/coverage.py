"""Coverage status transitions driven by incremental work (facts sheet §10)."""

from __future__ import annotations

import sqlalchemy as sa

from repository.clock import db_now
from repository.db import Bind, transaction
from repository.identity import registered, status_row
from repository.schema import (
    index_status,
    reconciliations,
    work,
)

st = index_status.c


def _active_status(collection_id: str, slug: str) -> list[sa.ColumnElement[bool]]:
    return [
        *status_row(collection_id, slug),
        st.capture_state == "active",
        registered(collection_id, slug),
    ]


# The success timestamp is only rewritten when a second old, so completions do not all queue on
# the status row's lock.
_success_note_due = sa.or_(
    st.last_incremental_success_at.is_(None), st.last_incremental_success_at < db_now(-1)
)


def record_incremental_success(bind: Bind, collection_id: str, slug: str) -> None:
    """Note the success; restore ``complete`` only when nothing is pending or being reconciled.

    Must run after the completing transaction committed (see the processor), so concurrent
    completions of the last two items cannot each see the other's row and both skip it.
    """
    with transaction(bind) as conn:
        current = conn.execute(
            sa.select(
                st.change_epoch,
                st.status,
                st.reconciliation_required,
                _success_note_due.label("note_due"),
            ).where(*_active_status(collection_id, slug))
        ).first()
        if current is None:
            return
        epoch, status, required, note_due = current
        if required or status not in ("stale", "partial"):
            # Nothing to restore: only the success timestamp moves.
            if note_due:
                conn.execute(
                    index_status.update()
                    .where(*_active_status(collection_id, slug), _success_note_due)
                    .values(last_incremental_success_at=db_now(), updated_at=db_now())
                )
            return
        restorable = sa.and_(
            st.reconciliation_required == 0,
            st.status.in_(("stale", "partial")),
            ~sa.exists(sa.select(1).where(work.c.collection_id == collection_id)),
        )
        # CAS on the epoch read above: a capture that committed since then (and whose work row
        # this statement's snapshot might not see) has moved the epoch, so nothing is marked
        # complete.
        conn.execute(
            index_status.update()
            .where(*_active_status(collection_id, slug), st.change_epoch == epoch)
            .values(
                status=sa.case((restorable, "complete"), else_=st.status),
                completed_at=sa.case((restorable, db_now()), else_=st.completed_at),
                last_error_code=sa.case((restorable, sa.null()), else_=st.last_error_code),
                last_incremental_success_at=db_now(),
                updated_at=db_now(),
            )
        )


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
            w.state == "failed",
            w.last_error_code == error_code,
        )
    )
    run_owns_status = sa.exists(
        sa.select(1).where(
            reconciliations.c.collection_id == collection_id,
            reconciliations.c.run_token == st.cursor,
        )
    )
    to_partial = sa.and_(~run_owns_status, st.reconciliation_required == 0)
    to_stale = sa.and_(~run_owns_status, st.reconciliation_required != 0, st.status == "running")
    with transaction(bind) as conn:
        conn.execute(
            index_status.update()
            .where(
                *status_row(collection_id, slug),
                registered(collection_id, slug),
                failed_row,
            )
            .values(
                status=sa.case((to_partial, "partial"), (to_stale, "stale"), else_=st.status),
                completed_at=sa.case(
                    (sa.or_(to_partial, to_stale), sa.null()), else_=st.completed_at
                ),
                cursor=sa.case((to_stale, sa.null()), else_=st.cursor),
                last_error_code=error_code,
                updated_at=db_now(),
            )
        )
