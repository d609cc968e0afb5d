"""Incremental capture lifecycle: the global activation switch and per-collection capture state.

Before activation, collections carry a ``never`` status row with no capture state and content
writes are not captured. ``activate`` (below) installs triggers everywhere and flips capture on;
from then on a new collection gets its triggers in the transaction that creates it.
"""

from __future__ import annotations

import sqlalchemy as sa

from repository import schema
from repository.clock import db_now

_status = schema.index_status.c
_activation = schema.activation.c


def is_activation_active(conn: sa.Connection) -> bool:
    state = conn.execute(
        sa.select(_activation.state).where(_activation.task_key == schema.CAPTURE_TASK_KEY)
    ).scalar_one_or_none()
    return state == "active"


def _status_row_for(collection_id: str, slug: str) -> sa.ColumnElement[bool]:
    return sa.and_(
        _status.adapter_id == schema.ADAPTER_ID,
        _status.scope_type == schema.SCOPE_TYPE,
        _status.scope_key == slug,
        _status.collection_id == collection_id,
    )


def prepare_new_collection(conn: sa.Connection, collection_id: str, slug: str) -> None:
    """Insert the new collection's status row: ``never``, reconciliation required."""
    conn.execute(
        schema.index_status.insert().values(
            adapter_id=schema.ADAPTER_ID,
            scope_type=schema.SCOPE_TYPE,
            scope_key=slug,
            status="never",
            collection_id=collection_id,
            change_epoch=0,
            reconciliation_required=1,
            capture_state="installing" if is_activation_active(conn) else None,
            updated_at=db_now(),
        )
    )


def install_for_new_collection(conn: sa.Connection, collection_id: str, slug: str) -> None:
    """While capture is active, install the new table's triggers inside the creating transaction."""
    if is_activation_active(conn):
        from repository import triggers

        triggers.install(conn, collection_id, slug)


def finish_new_collection(conn: sa.Connection, collection_id: str, slug: str) -> None:
    """After the registry row exists, turn capture on for the new collection."""
    conn.execute(
        schema.index_status.update()
        .where(_status_row_for(collection_id, slug), _status.capture_state == "installing")
        .values(capture_state="active", cursor=None, updated_at=db_now())
    )
