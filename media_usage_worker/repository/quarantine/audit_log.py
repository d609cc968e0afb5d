"""The audit of the clean-up: who retired, restored, purged or forgot what, and when; one row
per action, written in the transaction of the action itself."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from media_usage_worker.repository.base.clock import db_now
from media_usage_worker.repository.base.db import Bind, read_transaction
from media_usage_worker.repository.base.ids import new_ulid
from media_usage_worker.repository.base.schema import audit


def write_audit(
    conn: sa.Connection, actor: str, action: str, ids: list[str], detail: str | None
) -> None:
    conn.execute(
        audit.insert().values(
            id=new_ulid(), at=db_now(), actor=actor, action=action,
            media_ids=json.dumps(ids), detail=detail,
        )
    )  # fmt: skip


def audit_page(bind: Bind, limit: int) -> list[dict[str, Any]]:
    """The latest actions, newest first."""
    a = audit.c
    query = sa.select(audit).order_by(a.at.desc(), a.id.desc()).limit(limit)
    with read_transaction(bind) as conn:
        return [
            {**row._mapping, "media_ids": json.loads(row.media_ids)} for row in conn.execute(query)
        ]
