"""Checks that keep a downgrade from destroying media usage state (as emdash's migrations do)."""

from __future__ import annotations

import sqlalchemy as sa

from media_usage_worker.domain.errors import DowngradeRefused
from media_usage_worker.domain.vocabulary import ActivationState, CaptureState
from media_usage_worker.repository.base.schema import (
    activation,
    collection_deletions,
    index_status,
    reconciliations,
    work,
)


def _count(conn: sa.Connection, table: sa.Table, *where: sa.ColumnElement[bool]) -> int:
    return conn.execute(sa.select(sa.func.count()).select_from(table).where(*where)).scalar_one()


def assert_media_usage_drained(conn: sa.Connection) -> None:
    """Raise ``DowngradeRefused`` naming what still exists; reads only, changes nothing."""
    blockers = []
    if count := _count(conn, work):
        blockers.append(f"{count} work row(s)")
    if count := _count(conn, collection_deletions):
        blockers.append(f"{count} collection deletion tombstone(s)")
    if count := _count(conn, reconciliations):
        blockers.append(f"{count} reconciliation row(s)")
    if _count(conn, activation, activation.c.state != ActivationState.EXPANDED):
        blockers.append("incremental capture is activated")
    if count := _count(conn, index_status, index_status.c.capture_state == CaptureState.ACTIVE):
        blockers.append(f"capture is active on {count} collection(s)")
    if blockers:
        raise DowngradeRefused("Downgrade refused: " + "; ".join(blockers) + ".")


def drop_capture_function(conn: sa.Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("DROP FUNCTION IF EXISTS emdash_media_usage_capture_work() CASCADE")
