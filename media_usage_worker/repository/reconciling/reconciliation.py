"""The reconciliation coordinator table and the status-row statements of a run.

One coordinator row per collection that needs reconciling. Each function here is one guarded
statement or one transaction; the steps that call them are in
``media_usage_worker.pipeline.reconciliation`` (docs/design.md §6). A held coordinator is one
whose lease token is still on its row, ``leased`` and unexpired: every write of a step is
guarded on that, so a step that outlived its lease changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.policy import LEASE_SECONDS
from media_usage_worker.domain.snapshots import fields_of_run
from media_usage_worker.domain.vocabulary import (
    CaptureState,
    CoverageStatus,
    ErrorCode,
    ReconciliationPhase,
    ReconciliationState,
    WorkState,
)
from media_usage_worker.repository.base.clock import db_now
from media_usage_worker.repository.base.db import Bind, read_transaction, transaction
from media_usage_worker.repository.base.ids import new_ulid
from media_usage_worker.repository.base.predicates import (
    active_status_row,
    being_deleted,
    registered,
    status_row,
)
from media_usage_worker.repository.base.schema import (
    ADAPTER_ID,
    SCOPE_TYPE,
    backfill_ranges,
    generation_writes,
    index_status,
    occurrences,
    reconciliations,
    sources,
    work,
)
from media_usage_worker.repository.lifecycle.activation import is_activation_active
from media_usage_worker.repository.registry.content_tables import ids_in_key_range, scope_columns
from media_usage_worker.repository.registry.field_registry import load_fields
from media_usage_worker.repository.registry.rules_state import note_complete, record_indexed_rules
from media_usage_worker.repository.work_queue.leases import LeasedRows, leased_record, unleased


@dataclass(frozen=True)
class Coordinator:
    """A claimed coordinator row (as the claim returned it)."""

    collection_id: str
    collection_slug: str
    run_token: str
    target_epoch: int | None
    field_fingerprint: str | None
    state: ReconciliationState
    phase: ReconciliationPhase
    scan_cursor: str | None
    scan_upper_id: str | None
    source_cursor: str | None
    source_upper_key: str | None
    attempt_count: int
    lease_token: str | None

    @classmethod
    def from_row(cls, row: sa.Row[Any]) -> Coordinator:
        epoch = None if row.target_epoch is None else int(row.target_epoch)
        return leased_record(
            cls, row, state=ReconciliationState(row.state), phase=ReconciliationPhase(row.phase),
            target_epoch=epoch, attempt_count=int(row.attempt_count),
        )  # fmt: skip


_rc = reconciliations.c
_LEASES = LeasedRows(reconciliations, ReconciliationState.LEASED)
_st = index_status.c
_s = sources.c
_w = work.c


@dataclass(frozen=True)
class RunStart:
    epoch: int
    fields: list[FieldDefinition]
    scan_upper_id: str | None  # the largest content id when the run began


def _status_of(c: Coordinator) -> list[sa.ColumnElement[bool]]:
    return status_row(c.collection_id, c.collection_slug)


def _owns_run(c: Coordinator) -> list[sa.ColumnElement[bool]]:
    """The status row still belongs to this run. A write moves the epoch past the run's and
    keeps the run: its own work row, at the newer epoch, indexes it (docs/design.md §5). What
    must end a run (a field or rules change, a repair, deactivation) takes the status row."""
    return [
        *active_status_row(c.collection_id, c.collection_slug),
        _st.reconciliation_required == 1,
        _st.status == CoverageStatus.RUNNING,
        _st.cursor == c.run_token,
        _st.change_epoch >= c.target_epoch,
    ]


def _run_work(c: Coordinator) -> list[sa.ColumnElement[bool]]:
    """The run's own work: the collection's rows at its epoch or before. A write during the
    run queues its entry at a later epoch, so this set only shrinks while the run lasts."""
    return [_w.collection_id == c.collection_id, _w.change_epoch <= c.target_epoch]


def _held(c: Coordinator) -> list[sa.ColumnElement[bool]]:
    return _LEASES.held(c.collection_id, c.lease_token)


def _ranges_of(c: Coordinator) -> sa.Exists:
    """Key ranges of the collection are left (the run's own: a restart deletes the others)."""
    return sa.exists(sa.select(1).where(backfill_ranges.c.collection_id == c.collection_id))


def _content_sources(collection_id: str) -> list[sa.ColumnElement[bool]]:
    return [
        _s.source_type == "content",
        _s.collection_id == collection_id,
        _s.identity_version == 1,
    ]


# --- finding and claiming ------------------------------------------------------------------


def drop_finished(bind: Bind) -> bool:
    """Delete coordinators whose collection no longer needs reconciling.

    ``False`` (and nothing done) while capture is not activated: no run may start then.
    """
    with transaction(bind) as conn:
        if not is_activation_active(conn):
            return False
        conn.execute(
            reconciliations.delete().where(
                sa.exists(sa.select(1).where(*status_row(_rc.collection_id, _rc.collection_slug),
                                             _st.reconciliation_required == 0))
            )
        )  # fmt: skip
    return True


def reopen_failed_after_new_writes(bind: Bind) -> None:
    """A failed run is retried once the collection was written again (epoch moved on)."""
    moved_on = sa.exists(
        sa.select(1).where(
            *status_row(_rc.collection_id, _rc.collection_slug),
            _st.cursor.is_(None),
            _st.change_epoch > _rc.target_epoch,
        )
    )
    with transaction(bind) as conn:
        conn.execute(
            reconciliations.update()
            .where(_rc.state == ReconciliationState.FAILED, moved_on)
            .values(
                state=ReconciliationState.PENDING, phase=ReconciliationPhase.SCAN,
                run_token=new_ulid(), target_epoch=None, field_fingerprint=None,
                scan_cursor=None, scan_upper_id=None, source_cursor=None, source_upper_key=None,
                attempt_count=0, next_attempt_at=db_now(), last_error_code=None,
                updated_at=db_now(),
            )
        )  # fmt: skip


def seed(bind: Bind) -> None:
    """A coordinator for every registered, captured collection that needs reconciling."""
    needing = (
        sa.select(_st.collection_id, _st.scope_key)
        .where(
            _st.adapter_id == ADAPTER_ID,
            _st.scope_type == SCOPE_TYPE,
            _st.capture_state == CaptureState.ACTIVE,
            _st.reconciliation_required == 1,
            registered(_st.collection_id, _st.scope_key),
            ~sa.exists(sa.select(1).where(_rc.collection_id == _st.collection_id)),
            ~being_deleted(_st.collection_id),
        )
        .order_by(_st.collection_id)
    )
    with transaction(bind) as conn:
        for collection_id, slug in conn.execute(needing).all():
            conn.execute(
                reconciliations.insert().values(
                    collection_id=collection_id, collection_slug=slug, run_token=new_ulid(),
                    next_attempt_at=db_now(), created_at=db_now(), updated_at=db_now(),
                )
            )  # fmt: skip


# Work rows of a collection below which its reconciliation is woken: the next pages are
# enqueued while the workers still have this much to do, so they never wait for a tick.
WAKE_BELOW = 500


# Key ranges of a collection below which its reconciliation is woken: the scan hands out
# more while the workers still have these to do.
RANGES_WAKE_BELOW = 4


def _almost_drained(collection_id: Any) -> sa.ColumnElement[bool]:
    """Fewer than ``WAKE_BELOW`` work rows and ``RANGES_WAKE_BELOW`` key ranges left in the
    collection (counted up to that many)."""
    left = sa.select(1).where(_w.collection_id == collection_id).limit(WAKE_BELOW).subquery()
    ranges = (
        sa.select(1)
        .where(backfill_ranges.c.collection_id == collection_id)
        .limit(RANGES_WAKE_BELOW)
        .subquery()
    )
    return sa.and_(
        sa.select(sa.func.count()).select_from(left).scalar_subquery() < WAKE_BELOW,
        sa.select(sa.func.count()).select_from(ranges).scalar_subquery() < RANGES_WAKE_BELOW,
    )


# A coordinator waiting (pending, not leased or failed) on a collection whose work has almost
# drained becomes due now: its next step (more pages, or the phase after the drain) need not
# wait for the next reconcile tick.
_WAKE = (
    reconciliations.update()
    .where(
        _rc.collection_id == sa.bindparam("p_collection_id"),
        _rc.state == ReconciliationState.PENDING,
        _almost_drained(sa.bindparam("p_collection_id")),
    )
    .values(next_attempt_at=db_now(), updated_at=db_now())
    .returning(_rc.collection_id)
)


def work_backlog(bind: Bind, collection_id: str, up_to: int) -> int:
    """The collection's work rows, counted up to ``up_to`` (an index range, never the table)."""
    statement = sa.select(sa.func.count()).select_from(
        sa.select(1).where(_w.collection_id == collection_id).limit(up_to).subquery()
    )
    with transaction(bind) as conn:
        return int(conn.execute(statement).scalar_one())


def wake_if_drained(bind: Bind, collection_id: str) -> bool:
    """Make the collection's reconciliation due now if its work (almost) drained; ``True``
    when there was one to wake."""
    with transaction(bind) as conn:
        return conn.execute(_WAKE, {"p_collection_id": collection_id}).first() is not None


def due_collection_ids(bind: Bind, limit: int) -> list[str]:
    return _LEASES.due_ids(bind, limit)


def claim(bind: Bind, collection_id: str) -> Coordinator | None:
    """Lease the coordinator if it is (still) due; ``None`` when another tick has it."""
    row = _LEASES.claim(bind, collection_id, LEASE_SECONDS)
    return None if row is None else Coordinator.from_row(row)


# --- the held coordinator ------------------------------------------------------------------


def _update_held(conn: sa.Connection, c: Coordinator, **values: Any) -> bool:
    return _LEASES.move_held(conn, c.collection_id, c.lease_token, **values) is not None


def release(bind: Bind, c: Coordinator, delay: int = 0, **progress: Any) -> bool:
    """Give the lease back, due again in ``delay`` seconds, with the step's progress."""
    with transaction(bind) as conn:
        return _update_held(conn, c, **unleased(ReconciliationState.PENDING, delay), **progress)


def release_to_wait(bind: Bind, c: Coordinator, delay: int, *, for_all: bool) -> bool:
    """Give the lease back to wait for the workers: due again in ``delay`` seconds, or at once
    if what it waits for has happened already: the collection's work has almost drained (the
    scan, to queue more), or, ``for_all``, none is left but failed items (the barrier).

    A batch that drained the collection while this step held the lease found no pending
    coordinator to wake; its wake is not lost, because this statement (on the row that wake
    would have changed) sees that batch's completions.
    """
    unfinished = sa.or_(
        sa.exists(sa.select(1).where(*_run_work(c), _w.state != WorkState.FAILED)),
        _ranges_of(c),
    )
    done = ~unfinished if for_all else _almost_drained(c.collection_id)
    soon = sa.case((done, db_now()), else_=db_now(delay))
    with transaction(bind) as conn:
        return _update_held(
            conn, c, **unleased(ReconciliationState.PENDING, None), next_attempt_at=soon
        )


def record_retry(bind: Bind, c: Coordinator, code: ErrorCode, delay: int) -> None:
    with transaction(bind) as conn:
        _update_held(
            conn, c, **unleased(ReconciliationState.RETRY, delay),
            attempt_count=_rc.attempt_count + 1, last_error_code=code,
        )  # fmt: skip


def record_failed(bind: Bind, c: Coordinator, code: ErrorCode) -> None:
    """Fail the run for good: the coordinator and the coverage row in one transaction.

    One transaction, because a worker killed between the coordinator's "failed" and the
    coverage row would leave coverage "running" with this run's cursor, which nothing reopens.
    """
    with transaction(bind) as conn:
        if _update_held(
            conn, c, **unleased(ReconciliationState.FAILED, None),
            attempt_count=_rc.attempt_count + 1, last_error_code=code,
        ):  # fmt: skip
            _finish_failed_coverage(conn, c, code)


def _finish_failed_coverage(conn: sa.Connection, c: Coordinator, code: ErrorCode) -> None:
    """``partial`` if anything was indexed, else ``failed``, with the first failed entry's code."""
    stored: str = code
    if code == ErrorCode.RECONCILIATION_ENTRY_FAILED:
        first_failed = conn.execute(
            sa.select(_w.last_error_code)
            .where(_w.collection_id == c.collection_id, _w.state == WorkState.FAILED)
            .order_by(_w.content_id)
            .limit(1)
        ).scalar_one_or_none()
        stored = first_failed or code
    has_sources = sa.exists(sa.select(1).where(*_content_sources(c.collection_id)))
    conn.execute(
        index_status.update()
        .where(*_status_of(c), _st.status == CoverageStatus.RUNNING, _st.cursor == c.run_token)
        .values(
            status=sa.case((has_sources, CoverageStatus.PARTIAL.value),
                           else_=CoverageStatus.FAILED.value),
            completed_at=None, cursor=None, last_error_code=stored,
            reconciliation_required=1, updated_at=db_now(),
        )
    )  # fmt: skip


# --- a run -----------------------------------------------------------------------------------


def run_still_owned(bind: Bind, c: Coordinator) -> bool:
    with transaction(bind) as conn:
        return conn.execute(sa.select(1).where(*_owns_run(c))).first() is not None


def start_run(bind: Bind, c: Coordinator) -> RunStart | None:
    """Bump the epoch and take the status row for this run; ``None`` if another run has it.

    The same transaction reads the fields and the scan's upper bound, so the run indexes what
    the collection was at its epoch.
    """
    with transaction(bind) as conn:
        epoch = conn.execute(
            index_status.update()
            .where(
                *active_status_row(c.collection_id, c.collection_slug),
                _st.reconciliation_required == 1,
                sa.or_(
                    _st.status != CoverageStatus.RUNNING,
                    _st.cursor == c.run_token,
                    _st.cursor.is_(None),
                ),
                registered(c.collection_id, c.collection_slug),
            )
            .values(
                status=CoverageStatus.RUNNING, started_at=db_now(), completed_at=None,
                cursor=c.run_token, indexed_source_count=0, failed_source_count=0,
                last_error_code=None, change_epoch=_st.change_epoch + 1,
                reconciliation_required=1, updated_at=db_now(),
            )
            .returning(_st.change_epoch)
        ).scalar_one_or_none()  # fmt: skip
        if epoch is None:
            return None
        # The ranges of the run being restarted: their holders' next chunks find them gone.
        conn.execute(
            backfill_ranges.delete().where(backfill_ranges.c.collection_id == c.collection_id)
        )
        field_list = load_fields(conn, c.collection_id)
        content = scope_columns(c.collection_slug)
        upper = conn.execute(sa.select(sa.func.max(content.c.id))).scalar_one_or_none()
    return RunStart(int(epoch), field_list, upper)


def scan_page(bind: Bind, c: Coordinator, limit: int) -> list[str]:
    """The next content ids of the scan, up to the id that was largest when the run began."""
    if c.scan_upper_id is None:
        return []
    return ids_in_key_range(bind, c.collection_slug, c.scan_cursor, c.scan_upper_id, limit)


def hand_out_ranges(bind: Bind, c: Coordinator, bounds: list[tuple[str | None, str]]) -> bool:
    """Queue the scan's next key ranges, ``(after_key, last_key]`` each, in key order, and move
    the scan past the last: one transaction, only while this coordinator is held and its run
    still owns the status row. ``False`` (nothing written) otherwise."""
    assert c.target_epoch is not None and bounds
    with transaction(bind) as conn:
        if conn.execute(sa.select(1).where(*_owns_run(c))).first() is None:
            return False
        if not _update_held(conn, c, scan_cursor=bounds[-1][1]):
            return False
        conn.execute(
            backfill_ranges.insert(),
            [
                {
                    "range_id": new_ulid(), "collection_id": c.collection_id,
                    "collection_slug": c.collection_slug, "run_token": c.run_token,
                    "change_epoch": c.target_epoch, "after_key": after, "last_key": last,
                }
                for after, last in bounds
            ],
        )  # fmt: skip
    return True


def source_upper_key(bind: Bind, c: Coordinator) -> str | None:
    with transaction(bind) as conn:
        upper: str | None = conn.execute(
            sa.select(sa.func.max(_s.source_key)).where(*_content_sources(c.collection_id))
        ).scalar_one_or_none()
    return upper


def gone_in_source_range(bind: Bind, c: Coordinator, limit: int) -> tuple[str | None, list[str]]:
    """The sources phase's next step: the last of the next ``limit`` source keys (``None``: none
    left up to the phase's upper key), and the content ids in that range whose entry is gone.

    The database finds them (an anti-join of the range against the content table), so a step
    moves only the gone ids and two short reads however many entries it passes. The second
    read is bounded by the key the first found, not by a count: a source row written between
    the two cannot push a key of the range out of what the step checks.
    """
    if c.source_upper_key is None:
        return None, []
    in_phase = [*_content_sources(c.collection_id), _s.source_key <= c.source_upper_key]
    if c.source_cursor is not None:
        in_phase.append(_s.source_key > c.source_cursor)
    keys = sa.select(_s.source_key).where(*in_phase).order_by(_s.source_key).limit(limit)
    content = scope_columns(c.collection_slug)
    # Reads only: on SQLite no writer waits for them.
    with read_transaction(bind) as conn:
        last = conn.execute(sa.select(sa.func.max(keys.subquery().c.source_key))).scalar()
        if last is None:
            return None, []
        entry = sa.select(1).where(content.c.id == _s.content_id)
        gone = (
            sa.select(_s.content_id)
            .distinct()
            .where(*in_phase, _s.source_key <= last, ~sa.exists(entry))
            .order_by(_s.content_id)
        )
        return last, list(conn.execute(gone).scalars())


def work_states(bind: Bind, c: Coordinator) -> set[WorkState]:
    """The distinct states of the run's own work rows, and ``failed`` if any row of the
    collection failed (empty: the run has nothing left to wait for). Writes queued during the
    run are not waited for: the run can end while the site keeps writing."""
    query = (
        sa.select(_w.state)
        .distinct()
        .where(sa.or_(sa.and_(*_run_work(c)), sa.and_(
            _w.collection_id == c.collection_id, _w.state == WorkState.FAILED)))
    )  # fmt: skip
    with transaction(bind) as conn:
        return {WorkState(state) for state in conn.execute(query).scalars()}


def drop_foreign_rows(bind: Bind, c: Coordinator) -> int:
    """Delete the index rows of the collection this project did not write and no read trusts:
    emdash's own, keyed by the collection's slug (written by its in-process refresh before
    capture, or beside it on 0.32), and occurrences of a superseded generation (emdash leaves
    them to its own clean-up job; this project deletes them as it promotes the next). The run
    has by now indexed every entry of the collection into rows of its own, so what these
    named is found again wherever it is still used. Returns the rows deleted."""
    legacy = sa.select(_s.source_key).where(
        _s.source_type == "content",
        _s.collection_slug == c.collection_slug,
        sa.or_(
            _s.collection_id.is_(None),
            _s.collection_id != c.collection_id,
            _s.identity_version.is_(None),
            _s.identity_version != 1,
        ),
    )
    current = sa.select(1).where(
        _s.source_key == occurrences.c.source_key,
        _s.current_generation == occurrences.c.generation,
    )
    # A generation emdash is still writing (its write lease, whatever its age) is not
    # superseded: it may become current.
    being_written = sa.select(1).where(
        generation_writes.c.source_key == occurrences.c.source_key,
        generation_writes.c.generation == occurrences.c.generation,
    )
    own = sa.select(_s.source_key).where(*_content_sources(c.collection_id))
    with transaction(bind) as conn:
        deleted = conn.execute(
            occurrences.delete().where(occurrences.c.source_key.in_(legacy))
        ).rowcount
        deleted += conn.execute(sources.delete().where(_s.source_key.in_(legacy))).rowcount
        deleted += conn.execute(
            occurrences.delete().where(
                occurrences.c.source_key.in_(own), ~sa.exists(current), ~sa.exists(being_written)
            )
        ).rowcount
    return int(deleted)


# The status row, locked for the finalize (SKIP LOCKED: a host transaction holding it is
# never waited for; the step tries again a moment later). Under the lock no capture can move
# the epoch, so the work rows the finalize's own statement sees are every write's.
_LOCK_RUN_STATUS = (
    sa.select(_st.change_epoch)
    .where(*active_status_row(sa.bindparam("p_collection_id"), sa.bindparam("p_slug")))
    .with_for_update(skip_locked=True)
)


def finalize(bind: Bind, c: Coordinator) -> CoverageStatus | None:
    """End the run: every entry is indexed under the run's rules except those a write queued
    since, so coverage becomes ``complete``, or ``stale`` while such writes still wait (their
    completions restore ``complete``), and reconciliation is no longer required. ``None`` when
    nothing changed: the status row was busy, or the run no longer owns it.

    Guarded on everything at once: the run still owns the status row, the epoch is the one
    read under the row's lock, none of the run's own work is left, the coordinator is still
    held in its sources phase, the collection is registered and not being deleted.
    """
    held = sa.exists(sa.select(1).where(*_held(c), _rc.phase == ReconciliationPhase.SOURCES))
    writes_wait = sa.exists(sa.select(1).where(_w.collection_id == c.collection_id))
    params = {"p_collection_id": c.collection_id, "p_slug": c.collection_slug}
    with transaction(bind) as conn:
        epoch = conn.execute(_LOCK_RUN_STATUS, params).scalar_one_or_none()
        if epoch is None:
            return None
        done = conn.execute(
            index_status.update()
            .where(
                *_owns_run(c),
                _st.change_epoch == epoch,
                ~sa.exists(sa.select(1).where(*_run_work(c))),
                ~_ranges_of(c),
                held,
                registered(c.collection_id, c.collection_slug),
                ~being_deleted(c.collection_id),
            )
            .values(
                status=sa.case((writes_wait, CoverageStatus.STALE.value),
                               else_=CoverageStatus.COMPLETE.value),
                completed_at=sa.case((writes_wait, sa.null()), else_=db_now()),
                schema_version=1, cursor=None, last_error_code=None, reconciliation_required=0,
                updated_at=db_now(),
            )
            .returning(_st.status)
        ).first()  # fmt: skip
        if done is None:
            return None
        record_indexed_rules(conn, c.collection_id, fields_of_run(c.field_fingerprint))
        if done.status == CoverageStatus.COMPLETE:
            note_complete(conn, [c.collection_id])
        conn.execute(
            reconciliations.delete().where(
                _rc.collection_id == c.collection_id, _rc.lease_token == c.lease_token
            )
        )
    return CoverageStatus(done.status)
