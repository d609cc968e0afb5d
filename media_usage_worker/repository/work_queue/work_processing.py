"""The work rows' processing path: due selection, claim, complete, retry, fail, lease renewal.

Every state change is one guarded statement (a compare-and-set on the row, fenced by lease
token and work version), so the row stays the only truth however many workers, ticks and
duplicate messages race for it (docs/design.md §3). Arguments are validated before any I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain import validation as check
from media_usage_worker.domain.errors import InvalidArgument
from media_usage_worker.domain.vocabulary import DUE_STATES, ErrorCode, Outcome, WorkState
from media_usage_worker.domain.work import Lease, WorkRecord, due_order
from media_usage_worker.repository.base.clock import db_now, is_due, lease_is_live
from media_usage_worker.repository.base.db import Bind, read_transaction, transaction
from media_usage_worker.repository.base.ids import new_ulid
from media_usage_worker.repository.base.predicates import checked_only, due_or_expired
from media_usage_worker.repository.base.row_sets import RowSet
from media_usage_worker.repository.base.schema import collections, work
from media_usage_worker.repository.base.stored_text import StoredText
from media_usage_worker.repository.index.source_writes import EntryWrite, apply_writes
from media_usage_worker.repository.registry.content_tables import scope_columns
from media_usage_worker.repository.work_queue.work_rows import current_identity, to_record

_w = work.c

# The two statements every item runs are built once, with bound parameters only: building a
# Core statement per call cost more Python time than the database spent executing it.
_ITEM_VERSION = [
    _w.collection_id == sa.bindparam("p_collection_id", type_=sa.Text),
    _w.content_id == sa.bindparam("p_content_id", type_=sa.Text),
    _w.work_version == sa.bindparam("p_work_version", type_=sa.BigInteger),
]
_LIVE_LEASE = [
    *_ITEM_VERSION,
    checked_only(_w.state) == WorkState.LEASED,
    _w.lease_token == sa.bindparam("p_lease_token", type_=sa.Text),
    lease_is_live(_w.lease_expires_at),
]
_CLAIMABLE = due_or_expired(work)
_CLAIM = (
    work.update()
    .where(*_ITEM_VERSION, _CLAIMABLE)
    .values(
        state=WorkState.LEASED,
        lease_token=sa.bindparam("p_lease_token", type_=sa.Text),
        lease_expires_at=db_now(sa.bindparam("p_duration", type_=sa.Integer)),
        last_attempted_at=db_now(),
        updated_at=db_now(),
    )
    .returning(*work.c)
)
_COMPLETE = work.delete().where(*_LIVE_LEASE)


def _lease_params(
    collection_id: object, content_id: object, work_version: object, lease_token: object
) -> dict[str, Any]:
    """Validated parameters of ``_LIVE_LEASE``."""
    collection_id, content_id = check.identity(collection_id, content_id)
    return {
        "p_collection_id": collection_id,
        "p_content_id": content_id,
        "p_work_version": check.work_version(work_version),
        "p_lease_token": check.lease_token(lease_token),
    }


def _held_by(lease: Lease) -> dict[str, Any]:
    return _lease_params(
        lease.collection_id, lease.content_id, lease.work_version, lease.lease_token
    )


def _due_order(state: WorkState) -> tuple[str, ...]:
    """The columns of ``state``'s due index, in order (work_lease or work_due)."""
    if state == WorkState.LEASED:
        return ("lease_expires_at", "collection_id", "content_id")
    return ("next_attempt_at", "updated_at", "collection_id", "content_id")


@functools.cache
def _due_page_statement(state: WorkState, after: bool) -> sa.Select[Any]:
    """One state's due rows in its index order, from ``:d_<column>`` on with ``after``."""
    # Each state walks its own index in order; LIMIT stops early.
    order = [_w[name] for name in _due_order(state)]
    query = (
        sa.select(work)
        .where(_w.state == state, is_due(order[0]))
        .order_by(*order)
        .limit(sa.bindparam("d_limit", type_=sa.Integer))
    )
    if after:
        # StoredText: the last id of a page may be one a SQLite host stored as non-UTF-8.
        position = [sa.bindparam(f"d_{c.name}", type_=StoredText) for c in order]
        query = query.where(sa.tuple_(*order) > sa.tuple_(*position))
    return query


def due_query(state: WorkState, limit: int) -> sa.Select[Any]:
    """One state's first ``limit`` due rows in its index order (the bench EXPLAINs these)."""
    return _due_page_statement(state, False).params(d_limit=limit)


def find_due_work(bind: Bind, limit: int) -> list[WorkRecord]:
    """Up to ``limit`` due items in eligibility order (pending, retry, expired leases)."""
    limit = check.due_limit(limit)
    with read_transaction(bind) as conn:
        rows = [row for state in DUE_STATES for row in conn.execute(due_query(state, limit))]
    return sorted((to_record(row) for row in rows), key=due_order)[:limit]


def find_due_page(
    bind: Bind, state: WorkState, limit: int, after: WorkRecord | None = None
) -> list[WorkRecord]:
    """One keyset page of due rows of one state, in that state's index order.

    The tick walks pages with this so a large backlog costs index range scans, never
    OFFSETs; ``after`` is the last record of the previous page.
    """
    if state not in DUE_STATES:
        raise InvalidArgument("Due pages exist for pending, retry and leased work only.")
    params: dict[str, Any] = {"d_limit": check.due_limit(limit)}
    if after is not None:
        params |= {f"d_{name}": getattr(after, name) for name in _due_order(state)}
    query = _due_page_statement(state, after is not None)
    with read_transaction(bind) as conn:
        return [to_record(row) for row in conn.execute(query, params)]


def oldest_due(bind: Bind) -> tuple[str, str | None]:
    """The database's now and the earliest due time of any due row (``None`` if none)."""
    # One state per query: min() over a single state's index range is its first entry,
    # while an IN list makes the database aggregate every due row (slow with a backlog).
    candidates = [
        sa.select(sa.func.min(_w.next_attempt_at)).where(
            _w.state == state, is_due(_w.next_attempt_at)
        )
        for state in (WorkState.PENDING, WorkState.RETRY)
    ] + [
        sa.select(sa.func.min(_w.lease_expires_at)).where(
            _w.state == WorkState.LEASED, is_due(_w.lease_expires_at)
        ),
    ]
    with read_transaction(bind) as conn:
        now = conn.execute(sa.select(db_now())).scalar_one()
        found = [conn.execute(q).scalar_one_or_none() for q in candidates]
    due = [value for value in found if value is not None]
    return now, min(due) if due else None


def settle_unusable_work(bind: Bind, record: WorkRecord, error_code: ErrorCode) -> Outcome:
    """Settle a claimable item whose content id cannot be used (``is_usable_identifier``).

    Such an item is never claimed, sent or indexed. If its entry is gone it is obsolete
    (deleted); otherwise it fails at once with ``error_code``. Returns ``OBSOLETE``,
    ``FAILED``, or ``SUPERSEDED`` when the row moved on since it was read.
    """
    code = check.error_code(error_code)
    content = scope_columns(record.collection_slug)
    # The id is bound through StoredText (column types), so a SQLite id that is not UTF-8
    # is matched byte for byte.
    this_item = [
        _w.collection_id == record.collection_id,
        _w.content_id == record.content_id,
        _w.work_version == record.work_version,
        _CLAIMABLE,
    ]
    entry_gone = ~sa.exists(sa.select(1).where(content.c.id == _w.content_id))
    with transaction(bind) as conn:
        if conn.execute(work.delete().where(*this_item, entry_gone)).rowcount:
            return Outcome.OBSOLETE
        failed = conn.execute(
            work.update()
            .where(*this_item)
            .values(
                state=WorkState.FAILED, attempt_count=_w.attempt_count + 1, lease_token=None,
                lease_expires_at=None, last_attempted_at=db_now(), last_error_code=code,
                updated_at=db_now(),
            )
        ).rowcount  # fmt: skip
    return Outcome.FAILED if failed else Outcome.SUPERSEDED


def find_work_for_content(bind: Bind, collection_slug: str, content_id: str) -> WorkRecord | None:
    message = "Media usage work lookup requires collection and content identity."
    check.identifier(collection_slug, message)
    check.identifier(content_id, message)
    with read_transaction(bind) as conn:
        row = conn.execute(
            sa.select(work)
            .join(collections, current_identity)
            .where(_w.collection_slug == collection_slug, _w.content_id == content_id)
        ).first()
    return None if row is None else to_record(row)


def claim_work(
    bind: Bind,
    *,
    collection_id: str,
    content_id: str,
    work_version: int | str,
    lease_duration_seconds: int,
) -> WorkRecord | None:
    """Lease the row at exactly this version if it is due; ``None`` when someone else has it."""
    collection_id, content_id = check.identity(collection_id, content_id)
    version = check.work_version(work_version)
    duration = check.duration_seconds(lease_duration_seconds, "lease duration", allow_zero=False)
    params = {
        "p_collection_id": collection_id,
        "p_content_id": content_id,
        "p_work_version": version,
        "p_duration": duration,
        "p_lease_token": new_ulid(),
    }
    with transaction(bind) as conn:
        row = conn.execute(_CLAIM, params).first()
    return None if row is None else to_record(row)


# Each transition is fenced on one lease: the ``*_lease`` functions take it whole; the
# ``*_work`` ones (emdash's repository API, ``MediaUsageWorkRepository``) take its four parts.


def complete_lease(bind: Bind, lease: Lease) -> bool:
    """Delete the row if this lease still holds it; ``False`` means the holder was fenced."""
    return _complete(bind, _held_by(lease))


def complete_work(
    bind: Bind, *, collection_id: str, content_id: str, work_version: int | str, lease_token: str
) -> bool:
    return _complete(bind, _lease_params(collection_id, content_id, work_version, lease_token))


def _complete(bind: Bind, params: dict[str, Any]) -> bool:
    with transaction(bind) as conn:
        return conn.execute(_COMPLETE, params).rowcount > 0


def retry_lease(bind: Bind, lease: Lease, *, retry_delay_seconds: int, error_code: str) -> bool:
    """Due again after the delay, the attempt counted; ``False`` once the lease is lost."""
    return _retry(bind, _held_by(lease), retry_delay_seconds, error_code)


def retry_work(
    bind: Bind,
    *,
    collection_id: str,
    content_id: str,
    work_version: int | str,
    lease_token: str,
    retry_delay_seconds: int,
    error_code: str,
) -> bool:
    params = _lease_params(collection_id, content_id, work_version, lease_token)
    return _retry(bind, params, retry_delay_seconds, error_code)


def _retry(bind: Bind, params: dict[str, Any], retry_delay_seconds: int, error_code: str) -> bool:
    delay = check.duration_seconds(retry_delay_seconds, "retry delay", allow_zero=True)
    code = check.error_code(error_code)
    return _transition_failure(bind, params, WorkState.RETRY, code, next_attempt_at=db_now(delay))


def fail_lease(bind: Bind, lease: Lease, *, error_code: str) -> bool:
    """Failed for good; ``False`` once the lease is lost."""
    return _transition_failure(
        bind, _held_by(lease), WorkState.FAILED, check.error_code(error_code)
    )


def fail_work(
    bind: Bind,
    *,
    collection_id: str,
    content_id: str,
    work_version: int | str,
    lease_token: str,
    error_code: str,
) -> bool:
    code = check.error_code(error_code)
    params = _lease_params(collection_id, content_id, work_version, lease_token)
    return _transition_failure(bind, params, WorkState.FAILED, code)


def release_lease(bind: Bind, lease: Lease) -> bool:
    """Give a live lease back without charging an attempt: due again at once, as it was
    before the claim (``retry`` if it had failed before, else ``pending``). For an item
    that was claimed but never started because a batch-mate ran out of time."""
    return _release(bind, _held_by(lease))


def release_work(
    bind: Bind, *, collection_id: str, content_id: str, work_version: int | str, lease_token: str
) -> bool:
    return _release(bind, _lease_params(collection_id, content_id, work_version, lease_token))


def _release(bind: Bind, params: dict[str, Any]) -> bool:
    statement = (
        work.update()
        .where(*_LIVE_LEASE)
        .values(
            state=sa.case(
                (_w.attempt_count > 0, WorkState.RETRY.value), else_=WorkState.PENDING.value
            ),
            lease_token=None,
            lease_expires_at=None,
            next_attempt_at=db_now(),
            updated_at=db_now(),
        )
    )
    with transaction(bind) as conn:
        return conn.execute(statement, params).rowcount > 0


def extend_lease(
    bind: Bind,
    *,
    collection_id: str,
    content_id: str,
    work_version: int | str,
    lease_token: str,
    lease_duration_seconds: int,
) -> str | None:
    """Heartbeat: push a live lease's expiry to now + duration; ``None`` once it is lost."""
    duration = check.duration_seconds(lease_duration_seconds, "lease duration", allow_zero=False)
    params = _lease_params(collection_id, content_id, work_version, lease_token)
    with transaction(bind) as conn:
        expiry: str | None = conn.execute(
            work.update()
            .where(*_LIVE_LEASE)
            .values(lease_expires_at=db_now(duration))
            .returning(_w.lease_expires_at),
            params,
        ).scalar_one_or_none()
    return expiry


def _transition_failure(
    bind: Bind, params: dict[str, Any], state: WorkState, code: str, **extra: Any
) -> bool:
    statement = (
        work.update()
        .where(*_LIVE_LEASE)
        .values(
            state=state,
            attempt_count=_w.attempt_count + 1,
            lease_token=None,
            lease_expires_at=None,
            last_error_code=code,
            updated_at=db_now(),
            **extra,
        )
    )
    with transaction(bind) as conn:
        return conn.execute(statement, params).rowcount > 0


# A batch names its rows by (content id, work version) in one JSON parameter: one statement
# text for any batch size, where an OR of pairs cost milliseconds to build per call.
_VERSIONS = RowSet("versions", (("content_id", sa.Text()), ("work_version", sa.BigInteger())))


def _these_versions(dialect: str) -> list[sa.ColumnElement[bool]]:
    """Rows of ``:b_collection_id`` at exactly the ``:versions`` (content id, version) pairs."""
    v = _VERSIONS.table(dialect).c
    return [
        _w.collection_id == sa.bindparam("b_collection_id", type_=sa.Text),
        # The ids find the rows by primary key; the pairs then keep only the exact versions.
        _VERSIONS.contains(dialect, _w.content_id, "content_id"),
        sa.tuple_(_w.content_id, _w.work_version).in_(sa.select(v.content_id, v.work_version)),
    ]


def _batch_lease(dialect: str) -> list[sa.ColumnElement[bool]]:
    """The rows the batch lease ``:b_lease_token`` still holds: leased under it, unexpired."""
    return [
        *_these_versions(dialect),
        checked_only(_w.state) == WorkState.LEASED,
        _w.lease_token == sa.bindparam("b_lease_token", type_=sa.Text),
        lease_is_live(_w.lease_expires_at),
    ]


@functools.cache
def _batch_statements(dialect: str) -> dict[str, Any]:
    """The batch's claim, renewal and completion, built once per dialect."""
    duration = sa.bindparam("b_duration", type_=sa.Integer)
    claim = (
        work.update()
        .where(*_these_versions(dialect), _CLAIMABLE)
        .values(
            state=WorkState.LEASED,
            lease_token=sa.bindparam("b_lease_token", type_=sa.Text),
            lease_expires_at=db_now(duration),
            last_attempted_at=db_now(),
            updated_at=db_now(),
        )
        .returning(*work.c)
    )
    renew = work.update().where(*_batch_lease(dialect)).values(lease_expires_at=db_now(duration))
    complete = work.delete().where(*_batch_lease(dialect)).returning(_w.content_id)
    return {"claim": claim, "renew": renew, "complete": complete}


def _batch_params(
    collection_id: str, versions: Sequence[tuple[str, int]], **extra: Any
) -> dict[str, Any]:
    return {"b_collection_id": collection_id, **_VERSIONS.bind(versions), **extra}


def claim_batch(
    bind: Bind, collection_id: str, versions: Sequence[tuple[str, int]], lease_duration_seconds: int
) -> list[WorkRecord]:
    """Lease every row at exactly its version that is due (as ``claim_work`` would); rows
    that do not qualify are left alone and missing from the result."""
    check.identifier(collection_id, "A batch claim requires a collection ID.")
    duration = check.duration_seconds(lease_duration_seconds, "lease duration", allow_zero=False)
    if not versions:
        return []
    params = _batch_params(collection_id, versions, b_lease_token=new_ulid(), b_duration=duration)
    with transaction(bind) as conn:
        claim = _batch_statements(conn.dialect.name)["claim"]
        return [to_record(row) for row in conn.execute(claim, params)]


def extend_batch_lease(
    bind: Bind,
    collection_id: str,
    lease_token: str,
    versions: Sequence[tuple[str, int]],
    lease_duration_seconds: int,
) -> int:
    """Renew every row the batch still holds; returns how many it still holds."""
    duration = check.duration_seconds(lease_duration_seconds, "lease duration", allow_zero=False)
    params = _batch_params(collection_id, versions, b_lease_token=lease_token, b_duration=duration)
    with transaction(bind) as conn:
        renew = _batch_statements(conn.dialect.name)["renew"]
        renewed: int = conn.execute(renew, params).rowcount
    return renewed


def complete_batch_in(
    conn: sa.Connection, collection_id: str, lease_token: str, versions: Sequence[tuple[str, int]]
) -> set[str]:
    """Delete the rows the batch lease still holds, inside the caller's transaction; returns
    the content ids completed (the others were fenced: a newer write or another holder)."""
    if not versions:
        return set()
    complete = _batch_statements(conn.dialect.name)["complete"]
    params = _batch_params(collection_id, versions, b_lease_token=lease_token)
    return set(conn.execute(complete, params).scalars())


def write_and_complete(
    bind: Bind,
    collection_id: str,
    lease_token: str,
    items: Sequence[tuple[str, int, EntryWrite]],
) -> tuple[set[str], set[str]]:
    """One transaction for a batch of one collection: every entry's write (``apply_writes``),
    then one guarded statement completing every item whose write held.

    Returns the content ids written and those completed. A write that held but whose
    completion lost (a newer version was captured meanwhile) stays: the newer work redoes it.
    """
    with transaction(bind) as conn:
        held = apply_writes(conn, [write for _, _, write in items])
        written = {content_id for (content_id, _, _), ok in zip(items, held, strict=True) if ok}
        done = [(content_id, version) for content_id, version, _ in items if content_id in written]
        completed = complete_batch_in(conn, collection_id, lease_token, done)
    return written, completed
