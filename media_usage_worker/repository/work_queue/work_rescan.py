"""Work the rescans write: reconciliation pages, unusable ids they found, and repair's cleanup."""

from __future__ import annotations

import sqlalchemy as sa

from media_usage_worker.domain import validation as check
from media_usage_worker.domain.vocabulary import (
    CoverageStatus,
    ErrorCode,
    ReconciliationPhase,
    ReconciliationState,
    WorkState,
)
from media_usage_worker.repository.base.clock import db_now, is_live_by_text
from media_usage_worker.repository.base.db import Bind, transaction
from media_usage_worker.repository.base.predicates import (
    active_status_row,
    being_deleted,
    capture_activated,
    registered,
)
from media_usage_worker.repository.base.schema import index_status, reconciliations, work
from media_usage_worker.repository.base.stored_text import StoredText
from media_usage_worker.repository.base.upsert import insert_factory
from media_usage_worker.repository.work_queue.work_rows import (
    new_pending_columns,
    reset_to_pending,
    text,
)

_w = work.c

_rc = reconciliations.c
_st = index_status.c


def _run_owns(
    collection_id: str, collection_slug: str, run_token: str, lease_token: str, epoch: int,
    phase: ReconciliationPhase,
) -> sa.Exists:  # fmt: skip
    """This reconciliation run still holds its coordinator lease, the status row and capture
    (writes since the run began have moved the epoch on; they do not end it)."""
    return sa.exists(
        sa.select(1).where(
            _rc.collection_id == collection_id,
            _rc.collection_slug == collection_slug,
            _rc.run_token == run_token,
            _rc.target_epoch == epoch,
            _rc.state == ReconciliationState.LEASED,
            _rc.phase == phase,
            _rc.lease_token == lease_token,
            is_live_by_text(_rc.lease_expires_at),
            *active_status_row(_rc.collection_id, _rc.collection_slug),
            _st.reconciliation_required == 1,
            _st.status == CoverageStatus.RUNNING,
            _st.cursor == run_token,
            _st.change_epoch >= epoch,
            registered(_rc.collection_id, _rc.collection_slug),
            capture_activated(),
            ~being_deleted(_rc.collection_id),
        )
    )


def enqueue_reconciliation_page(
    bind: Bind,
    *,
    collection_id: str,
    collection_slug: str,
    run_token: str,
    lease_token: str,
    change_epoch: int | str,
    phase: str,
    content_ids: list[str] | tuple[str, ...],
) -> None:
    """Enqueue up to 50 entries at the run's epoch, only while this run still owns it."""
    message = "Reconciliation enqueue requires exact collection and lease identity."
    for value in (collection_id, collection_slug, run_token, lease_token):
        check.identifier(value, message)
    epoch = check.change_epoch(change_epoch)
    checked_phase = check.reconciliation_phase(phase)
    ids = check.reconciliation_content_ids(content_ids)

    owner_guard = _run_owns(
        collection_id, collection_slug, run_token, lease_token, epoch, checked_phase
    )
    with transaction(bind) as conn:
        upsert_run_work(conn, collection_id, collection_slug, epoch, ids, owner_guard)


def upsert_run_work(
    conn: sa.Connection,
    collection_id: str,
    collection_slug: str,
    epoch: int,
    ids: list[str],
    guard: sa.ColumnElement[bool] | None = None,
) -> None:
    """Queue up to 50 checked ids as a run's work at ``epoch`` (while ``guard`` holds), inside
    the caller's transaction."""
    page = (
        sa.values(sa.column("content_id", sa.Text), name="page")
        .data([(i,) for i in ids])
        .cte("page")
    )
    source = sa.select(
        *new_pending_columns(
            text(collection_id),
            text(collection_slug),
            page.c.content_id,
            sa.literal(epoch, sa.BigInteger),
        )
    ).where(sa.true() if guard is None else guard)
    insert = insert_factory(conn)(work).from_select([c.name for c in work.c], source)
    # Conflict: same reset as the capture trigger, but never over newer-epoch work. A row still
    # pending keeps its version: nobody has read its entry yet, so whoever claims it reads it
    # after this run began, and the message already sent for it (a host's write during a
    # backfill, on the fast path) stays good instead of waiting for the run's own pages.
    statement = insert.on_conflict_do_update(
        index_elements=[_w.collection_id, _w.content_id],
        set_={
            "collection_slug": insert.excluded.collection_slug,
            "work_version": sa.case(
                (_w.state == WorkState.PENDING, _w.work_version), else_=_w.work_version + 1
            ),
            **reset_to_pending(insert.excluded.change_epoch),
            "next_attempt_at": insert.excluded.next_attempt_at,
            "updated_at": insert.excluded.updated_at,
        },
        where=_w.change_epoch < insert.excluded.change_epoch,
    )
    conn.execute(statement)


def record_unusable_content(
    bind: Bind,
    *,
    collection_id: str,
    collection_slug: str,
    content_id: str,
    change_epoch: int,
    error_code: ErrorCode = ErrorCode.UNUSABLE_CONTENT_ID,
) -> bool:
    """A failed row for an entry a rescan found with an unusable id, unless it has a row.

    The reconciliation scan and repair read such ids; they cannot be enqueued as work
    (nothing could claim them), so they are written as failed work for ``work list``.
    """
    code = check.error_code(error_code)
    epoch = check.change_epoch(change_epoch)
    row = sa.select(
        text(collection_id).label("collection_id"),
        text(collection_slug).label("collection_slug"),
        sa.literal(content_id, StoredText).label("content_id"),
        sa.literal(epoch, sa.BigInteger).label("change_epoch"),
        sa.literal(1, sa.BigInteger).label("work_version"),
        sa.literal(WorkState.FAILED.value).label("state"),
        sa.literal(1).label("attempt_count"),
        db_now().label("next_attempt_at"),
        db_now().label("last_attempted_at"),
        sa.literal(code).label("last_error_code"),
        db_now().label("created_at"),
        db_now().label("updated_at"),
    ).where(registered(collection_id, collection_slug))
    names = [c.name for c in row.selected_columns]
    insert = insert_factory(bind)(work).from_select(names, row).on_conflict_do_nothing()
    with transaction(bind) as conn:
        return conn.execute(insert).rowcount > 0


def delete_work_through_epoch(bind: Bind, collection_id: str, max_change_epoch: int | str) -> int:
    check.identifier(collection_id, "Media usage work cleanup requires a collection ID.")
    epoch = check.change_epoch(max_change_epoch)
    with transaction(bind) as conn:
        deleted: int = conn.execute(
            work.delete().where(_w.collection_id == collection_id, _w.change_epoch <= epoch)
        ).rowcount
    return deleted
