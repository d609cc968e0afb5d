"""The lease protocol of the tables whose rows are leased per collection: deletion tombstones and
reconciliation coordinators.

A row is due when its next attempt is due, or when its holder's lease expired (the holder was
killed); a claim is one guarded update that gives it a fresh token and expiry; every later write
of the holder is guarded by that token and an unexpired lease, so a holder that outlived its
lease changes nothing (docs/design.md §3).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, TypeVar

import sqlalchemy as sa

from media_usage_worker.repository.base.clock import db_now, is_live_by_text
from media_usage_worker.repository.base.db import Bind, read_transaction, transaction
from media_usage_worker.repository.base.ids import new_ulid
from media_usage_worker.repository.base.predicates import due_or_expired


@dataclass(frozen=True)
class LeasedRows:
    """One such table (keyed by ``collection_id``) and the state value of a leased row."""

    table: sa.Table
    leased: str

    def due_ids(self, bind: Bind, limit: int) -> list[str]:
        """Collections whose row is due, oldest first."""
        c = self.table.c
        query = (
            sa.select(c.collection_id)
            .where(due_or_expired(self.table))
            .order_by(c.next_attempt_at, c.updated_at, c.collection_id)
            .limit(limit)
        )
        with read_transaction(bind) as conn:
            return list(conn.execute(query).scalars())

    def claim(self, bind: Bind, collection_id: str, lease_seconds: int) -> sa.Row[Any] | None:
        """Lease the row if it is (still) due; ``None`` when another holder has it."""
        c = self.table.c
        with transaction(bind) as conn:
            return conn.execute(
                self.table.update()
                .where(c.collection_id == collection_id, due_or_expired(self.table))
                .values(
                    state=self.leased,
                    lease_token=new_ulid(),
                    lease_expires_at=db_now(lease_seconds),
                    updated_at=db_now(),
                )
                .returning(*self.table.c)
            ).first()

    def held(self, collection_id: str, token: str | None) -> list[sa.ColumnElement[bool]]:
        """The row is still leased under ``token`` and its lease has not expired."""
        c = self.table.c
        return [
            c.collection_id == collection_id,
            c.lease_token == token,
            c.state == self.leased,
            is_live_by_text(c.lease_expires_at),
        ]

    def move_held(
        self, conn: sa.Connection, collection_id: str, token: str | None, **values: Any
    ) -> sa.Row[Any] | None:
        """Update the held row (one guarded statement; also the transaction's lock on it);
        ``None`` when the lease was lost."""
        return conn.execute(
            self.table.update()
            .where(*self.held(collection_id, token))
            .values(**values, updated_at=db_now())
            .returning(*self.table.c)
        ).first()


T = TypeVar("T")


def leased_record(cls: type[T], row: sa.Row[Any], **converted: Any) -> T:
    """A dataclass ``cls`` (a tombstone, a coordinator) from its row: each field's column, or
    the value given in ``converted`` (an enum, an int) instead."""
    values = {f.name: getattr(row, f.name) for f in fields(cls)}  # type: ignore[arg-type]
    values.update(converted)
    return cls(**values)


def unleased(state: str, delay_seconds: int | None) -> dict[str, Any]:
    """The values that give a lease back in ``state``, due again in ``delay_seconds`` (``None``:
    not due again, as a failed row)."""
    values: dict[str, Any] = {"state": state, "lease_token": None, "lease_expires_at": None}
    if delay_seconds is not None:
        values["next_attempt_at"] = db_now(delay_seconds)
    return values
