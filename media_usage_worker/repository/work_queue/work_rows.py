"""What every part of the work table's statements shares: row mapping and fresh-row values.

The statements are split by concern (``work_processing``, ``work_operator``, ``work_rescan``);
``repository.work.MediaUsageWorkRepository`` binds all of them to one object, the public API.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.errors import MediaUsageError
from media_usage_worker.domain.vocabulary import WorkState
from media_usage_worker.domain.work import WorkRecord
from media_usage_worker.repository.base.clock import db_now
from media_usage_worker.repository.base.schema import collections, work

_w = work.c
# Work rows count only while their (collection id, slug) is still the registered collection.
current_identity = sa.and_(
    collections.c.id == _w.collection_id, collections.c.slug == _w.collection_slug
)
_STATES = frozenset(state.value for state in WorkState)
_RECORD_FIELDS = tuple(f.name for f in fields(WorkRecord))


def to_record(row: sa.Row[Any]) -> WorkRecord:
    if row.state not in _STATES:
        raise MediaUsageError(f"Invalid media usage work state: {row.state!r}")
    values = {name: getattr(row, name) for name in _RECORD_FIELDS}
    values["state"] = WorkState(row.state)
    for name in ("change_epoch", "work_version", "attempt_count"):
        values[name] = int(values[name])
    return WorkRecord(**values)


def reset_to_pending(change_epoch: Any) -> dict[str, Any]:
    """The values that make a row fresh pending work at ``change_epoch``."""
    return {
        "change_epoch": change_epoch,
        "state": WorkState.PENDING,
        "attempt_count": 0,
        "next_attempt_at": db_now(),
        "lease_token": None,
        "lease_expires_at": None,
        "last_attempted_at": None,
        "last_error_code": None,
        "updated_at": db_now(),
    }


def new_pending_columns(
    collection_id: sa.ColumnElement[Any],
    collection_slug: sa.ColumnElement[Any],
    content_id: sa.ColumnElement[Any],
    change_epoch: sa.ColumnElement[Any],
) -> list[sa.ColumnElement[Any]]:
    """SELECT list of a fresh work row in ``work``'s column order (every insert names all 14)."""
    return [
        collection_id.label("collection_id"),
        collection_slug.label("collection_slug"),
        content_id.label("content_id"),
        change_epoch.label("change_epoch"),
        sa.literal(1, sa.BigInteger).label("work_version"),
        sa.literal(WorkState.PENDING.value, sa.Text).label("state"),
        sa.literal(0, sa.Integer).label("attempt_count"),
        db_now().label("next_attempt_at"),
        sa.null().label("lease_token"),
        sa.null().label("lease_expires_at"),
        sa.null().label("last_attempted_at"),
        sa.null().label("last_error_code"),
        db_now().label("created_at"),
        db_now().label("updated_at"),
    ]


def text(value: str) -> sa.ColumnElement[str]:
    return sa.literal(value, sa.Text)
