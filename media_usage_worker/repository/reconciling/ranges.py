"""Key ranges of a reconciliation's scan: the worker's side (docs/design.md §6, "Ranges").

A range is one collection's content ids in ``(after_key, last_key]``, handed out by the run's
coordinator (``repository.reconciliation.hand_out_ranges``) in place of a work row per entry.
A worker claims it under a lease like a work item, and commits it a chunk at a time: each
chunk's transaction begins by locking the range row while the lease holds, the run is still the
one that made the range and the collection's capture is active (``hold``), so a holder whose
lease expired, whose run was restarted or whose collection is being deleted writes nothing; it
ends by moving ``after_key`` on (``move_on``; the last chunk deletes the range). What a range
cannot index itself goes back as ordinary work rows at the run's epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.validation import RECONCILIATION_PAGE_LIMIT, split_usable
from media_usage_worker.domain.vocabulary import ReconciliationState
from media_usage_worker.repository.base.clock import db_now, is_live_by_text
from media_usage_worker.repository.base.db import Bind, read_transaction, transaction
from media_usage_worker.repository.base.ids import new_ulid
from media_usage_worker.repository.base.predicates import active_status_row
from media_usage_worker.repository.base.schema import backfill_ranges, reconciliations
from media_usage_worker.repository.registry.content_tables import ids_in_key_range
from media_usage_worker.repository.work_queue.work_rescan import upsert_run_work

__all__ = [
    "BackfillRange",
    "claim_range",
    "demote",
    "enqueue_entries",
    "hold",
    "mark_for_dispatch",
    "move_on",
    "next_ids",
    "ranges_left",
    "release_range",
]

_r = backfill_ranges.c
_rc = reconciliations.c
PENDING = ReconciliationState.PENDING.value
LEASED = ReconciliationState.LEASED.value


@dataclass(frozen=True)
class BackfillRange:
    """A claimed range, as the claim returned it (``after_key`` as the holder moves it on)."""

    range_id: str
    collection_id: str
    collection_slug: str
    run_token: str
    change_epoch: int
    after_key: str | None
    last_key: str
    claim_count: int
    lease_token: str

    @classmethod
    def from_row(cls, row: sa.Row[Any]) -> BackfillRange:
        return cls(
            row.range_id, row.collection_id, row.collection_slug, row.run_token,
            int(row.change_epoch), row.after_key, row.last_key, int(row.claim_count),
            row.lease_token,
        )  # fmt: skip


def _claimable() -> sa.ColumnElement[bool]:
    """Waiting for a worker, or leased by one whose lease expired (it was killed)."""
    return sa.or_(
        _r.state == PENDING,
        sa.and_(_r.state == LEASED, _r.lease_expires_at.is_not(None),
                ~is_live_by_text(_r.lease_expires_at)),
    )  # fmt: skip


def _held(r: BackfillRange) -> list[sa.ColumnElement[bool]]:
    """Still leased under this token, unexpired, and its run not restarted since (a restart
    deletes the run's ranges; a worker of before ranges restarts a run without knowing them,
    so the coordinator's epoch is checked too)."""
    run = sa.select(1).where(
        _rc.collection_id == r.collection_id,
        _rc.run_token == r.run_token,
        _rc.target_epoch == r.change_epoch,
    )
    # Capture still on and the collection not being deleted: its fence stops every range.
    captured = sa.select(1).where(*active_status_row(r.collection_id, r.collection_slug))
    return [
        _r.range_id == r.range_id,
        _r.lease_token == r.lease_token,
        _r.state == LEASED,
        is_live_by_text(_r.lease_expires_at),
        sa.exists(run),
        sa.exists(captured),
    ]


def claim_range(
    bind: Bind, collection_id: str, range_id: str, lease_seconds: int
) -> BackfillRange | None:
    """Lease the range if it is claimable; ``None`` when it is done, held, or not this one."""
    with transaction(bind) as conn:
        row = conn.execute(
            backfill_ranges.update()
            .where(_r.range_id == range_id, _r.collection_id == collection_id, _claimable())
            .values(
                state=LEASED, lease_token=new_ulid(), lease_expires_at=db_now(lease_seconds),
                claim_count=_r.claim_count + 1, updated_at=db_now(),
            )
            .returning(*backfill_ranges.c)
        ).first()  # fmt: skip
    return None if row is None else BackfillRange.from_row(row)


def next_ids(bind: Bind, r: BackfillRange, limit: int) -> list[str]:
    """The range's next content ids, in key order (the scan's order)."""
    return ids_in_key_range(bind, r.collection_slug, r.after_key, r.last_key, limit)


# How long a chunk's statement waits for a row lock on PostgreSQL before it gives up (and the
# chunk goes back as work items): shorter than the server's deadlock check (1 s by default),
# so in a lock cycle with a host's transaction it is always the chunk that is aborted, never
# the host's write.
CHUNK_LOCK_TIMEOUT_MS = 500
_CHUNK_LOCK_TIMEOUT = sa.text(f"SET LOCAL lock_timeout = {CHUNK_LOCK_TIMEOUT_MS}")


def hold(conn: sa.Connection, r: BackfillRange) -> bool:
    """The first statement of a chunk's transaction: lock the range row until the commit while
    the lease holds, the run is still the one that made it and capture is active, so a restart
    of the run waits for the chunk or finds the range gone. ``False``: lost, and the caller must
    write nothing."""
    if conn.dialect.name == "postgresql":
        conn.execute(_CHUNK_LOCK_TIMEOUT)
    held = sa.select(_r.range_id).where(*_held(r)).with_for_update(of=backfill_ranges)
    return conn.execute(held).first() is not None


def move_on(conn: sa.Connection, r: BackfillRange, to_key: str, lease_seconds: int) -> bool:
    """The last statement of a chunk's transaction (after ``hold``): the range now starts after
    ``to_key`` (deleted once that is its last key), and its lease runs ``lease_seconds`` more."""
    if to_key == r.last_key:
        statement: Any = backfill_ranges.delete().where(*_held(r))
    else:
        statement = (
            backfill_ranges.update()
            .where(*_held(r))
            .values(after_key=to_key, lease_expires_at=db_now(lease_seconds), updated_at=db_now())
        )
    return conn.execute(statement.returning(_r.range_id)).first() is not None


def enqueue_entries(conn: sa.Connection, r: BackfillRange, content_ids: Sequence[str]) -> None:
    """Entries the range hands back as work rows at the run's epoch, in the caller's
    transaction (between ``hold`` and ``move_on``): they get the retries, backoff and failure
    of work items."""
    ids = list(dict.fromkeys(content_ids))
    for start in range(0, len(ids), RECONCILIATION_PAGE_LIMIT):
        page = ids[start : start + RECONCILIATION_PAGE_LIMIT]
        upsert_run_work(conn, r.collection_id, r.collection_slug, r.change_epoch, page)


def demote(bind: Bind, r: BackfillRange) -> int:
    """Give the rest of the range back as work rows at the run's epoch, and delete it: a range
    claimed too often (killed or out of time each time) is worked entry by entry, where the
    entry that costs the time is the one charged. The number of entries handed back."""
    with transaction(bind) as conn:
        if conn.execute(backfill_ranges.delete().where(*_held(r)).returning(_r.range_id)).first():
            rest = ids_in_key_range(conn, r.collection_slug, r.after_key, r.last_key)
            usable, _ = split_usable(rest, lambda content_id: content_id)
            enqueue_entries(conn, r, usable)
            return len(usable)
    return 0


def release_range(bind: Bind, r: BackfillRange) -> bool:
    """Give the lease back (the soft time limit): claimable at once and sent again soon."""
    with transaction(bind) as conn:
        return (
            conn.execute(
                backfill_ranges.update()
                .where(*_held(r))
                .values(state=PENDING, lease_token=None, lease_expires_at=None,
                        dispatched_at=None, updated_at=db_now())
                .returning(_r.range_id)
            ).first()
            is not None
        )  # fmt: skip


def ranges_left(bind: Bind, collection_id: str, up_to: int) -> int:
    """The collection's ranges, counted up to ``up_to``."""
    statement = sa.select(sa.func.count()).select_from(
        sa.select(1).where(_r.collection_id == collection_id).limit(up_to).subquery()
    )
    with read_transaction(bind) as conn:
        return int(conn.execute(statement).scalar_one())


def mark_for_dispatch(bind: Bind, resend_seconds: int, limit: int) -> list[tuple[str, str, int]]:
    """Ranges whose message is to be sent: never sent, or claimable and last sent more than
    ``resend_seconds`` ago (its message was lost or starved, or its holder died). Marked sent
    now, in one guarded statement, so two senders never both send one; ``(collection_id,
    range_id, times sent)``."""
    # A range whose run is gone (deactivated, restarted) is never sent: nothing could hold it.
    run = sa.select(1).where(
        _rc.collection_id == _r.collection_id,
        _rc.run_token == _r.run_token,
        _rc.target_epoch == _r.change_epoch,
    )
    due = sa.and_(
        sa.or_(
            _r.dispatched_at.is_(None),
            sa.and_(_claimable(), _r.dispatched_at <= db_now(-resend_seconds)),
        ),
        sa.exists(run),
    )
    order = (_r.created_at, _r.collection_id, _r.last_key)
    chosen = sa.select(_r.range_id).where(due).order_by(*order).limit(limit)
    with transaction(bind) as conn:
        rows = conn.execute(
            backfill_ranges.update()
            .where(_r.range_id.in_(chosen), due)
            .values(dispatched_at=db_now(), dispatch_count=_r.dispatch_count + 1)
            .returning(_r.collection_id, _r.range_id, _r.dispatch_count)
        ).all()
    return [(row.collection_id, row.range_id, int(row.dispatch_count)) for row in rows]
