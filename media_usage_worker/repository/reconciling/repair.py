"""The statements of a manual repair (docs/design.md §9): take, page, finish the status row.

A repair holds the collection's status row through a run token in ``cursor`` at the epoch it
started at; it never bumps the epoch, so any write during the repair shows as a moved epoch.
"""

from __future__ import annotations

import sqlalchemy as sa

from media_usage_worker.domain.errors import RepairNotPossible
from media_usage_worker.domain.vocabulary import CoverageStatus, ErrorCode
from media_usage_worker.repository.base.clock import db_now
from media_usage_worker.repository.base.db import Bind, transaction
from media_usage_worker.repository.base.predicates import active_status_row, status_row
from media_usage_worker.repository.base.schema import index_status, sources, work
from media_usage_worker.repository.lifecycle.activation import is_activation_active
from media_usage_worker.repository.registry.content_tables import scope_columns
from media_usage_worker.repository.registry.rules_state import note_complete, record_indexed_rules

_st = index_status.c
_s = sources.c


def begin_repair(
    engine: sa.Engine, collection_id: str, slug: str, run_token: str
) -> tuple[int, int]:
    """Mark the status row ``running`` under ``run_token``; returns (epoch, entry count)."""
    with transaction(engine) as conn:
        if not is_activation_active(conn):
            raise RepairNotPossible("Repair needs incremental capture to be activated first.")
        epoch = conn.execute(
            index_status.update()
            .where(*active_status_row(collection_id, slug))
            .values(
                status=CoverageStatus.RUNNING, schema_version=1, started_at=db_now(),
                completed_at=None, cursor=run_token, indexed_source_count=0,
                failed_source_count=0, last_error_code=None, reconciliation_required=1,
                updated_at=db_now(),
            )
            .returning(_st.change_epoch)
        ).scalar_one_or_none()  # fmt: skip
        if epoch is None:
            raise RepairNotPossible(f"Capture is not active for collection {slug!r}.")
        content = scope_columns(slug)
        total = conn.execute(sa.select(sa.func.count()).select_from(content)).scalar_one()
    return int(epoch), int(total)


def content_id_page(bind: Bind, slug: str, after: str | None, limit: int) -> list[str]:
    """The next ``limit`` content ids of the collection in id order, after ``after``."""
    content = scope_columns(slug)
    query = sa.select(content.c.id).order_by(content.c.id).limit(limit)
    if after is not None:
        query = query.where(content.c.id > after)
    with transaction(bind) as conn:
        return list(conn.execute(query).scalars())


def orphaned_content_ids(bind: Bind, collection_id: str, slug: str) -> list[str]:
    """Content ids that have index sources but no content row any more."""
    content = scope_columns(slug)
    with transaction(bind) as conn:
        return list(
            conn.execute(
                sa.select(_s.content_id)
                .distinct()
                .where(
                    _s.collection_id == collection_id,
                    _s.identity_version == 1,
                    ~sa.exists(sa.select(1).where(content.c.id == _s.content_id)),
                )
            ).scalars()
        )


def finish_repair(
    engine: sa.Engine, collection_id: str, slug: str, run_token: str, epoch: int, *,
    outcome: CoverageStatus, indexed: int, failed: int, error: str | None,
) -> CoverageStatus:  # fmt: skip
    """Write the repair's result if the run still owns the row at its epoch, else ``stale``.

    ``complete`` is written only when no work is left for the collection at all: a write that
    landed during the repair moved the epoch and left its work queued.
    """
    own_status = status_row(collection_id, slug)
    with transaction(engine) as conn:
        finalized = conn.execute(
            index_status.update()
            .where(
                *own_status,
                _st.status == CoverageStatus.RUNNING,
                _st.cursor == run_token,
                _st.change_epoch == epoch,
                sa.or_(
                    sa.literal(outcome != CoverageStatus.COMPLETE),
                    ~sa.exists(sa.select(1).where(work.c.collection_id == collection_id)),
                ),
            )
            .values(
                status=outcome, completed_at=db_now(), cursor=None, indexed_source_count=indexed,
                failed_source_count=failed, last_error_code=error,
                reconciliation_required=0 if outcome == CoverageStatus.COMPLETE else 1,
                updated_at=db_now(),
            )
            .returning(_st.status)
        ).first()  # fmt: skip
        if finalized is not None:
            if outcome == CoverageStatus.COMPLETE:
                record_indexed_rules(conn, collection_id)
                note_complete(conn, [collection_id])
            return outcome
        conn.execute(
            index_status.update()
            .where(*own_status, _st.cursor == run_token)
            .values(
                status=CoverageStatus.STALE, completed_at=None, cursor=None,
                last_error_code=ErrorCode.REPAIR_CONFLICT, reconciliation_required=1,
                updated_at=db_now(),
            )
        )  # fmt: skip
    return CoverageStatus.STALE
