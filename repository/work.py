"""``MediaUsageWorkRepository``: the durable work table, a port of emdash 0.34.0's repository.

Every state change is one guarded statement (a compare-and-set on the row), so the database row
stays the only truth however many workers, ticks and duplicate messages race for it. "Now" is
always the database's clock (``repository.clock``). Arguments are validated before any I/O.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain import validation as check
from media_usage_worker.domain.cursor import decode_cursor, encode_cursor
from media_usage_worker.domain.errors import InvalidArgument, MediaUsageError
from media_usage_worker.domain.work import (
    OperatorRetryResult,
    OperatorWorkItem,
    Page,
    WorkRecord,
    due_order,
    operator_order,
)
from repository.clock import db_now, is_due, is_live_by_text, lease_is_live
from repository.content_tables import content_columns
from repository.db import Bind, read_transaction, transaction
from repository.identity import registered, status_row
from repository.ids import new_ulid
from repository.schema import (
    ADAPTER_ID,
    CAPTURE_TASK_KEY,
    SCOPE_TYPE,
    activation,
    collection_deletions,
    collections,
    index_status,
    reconciliations,
    work,
)
from repository.stored_text import StoredText
from repository.upsert import insert_factory

w = work.c
_status = index_status.c
# Work rows count only while their (collection id, slug) is still the registered collection.
_current_identity = sa.and_(
    collections.c.id == w.collection_id, collections.c.slug == w.collection_slug
)


def _record(row: sa.Row[Any]) -> WorkRecord:
    if row.state not in check.WORK_STATES:
        raise MediaUsageError(f"Invalid media usage work state: {row.state!r}")
    return WorkRecord(
        collection_id=row.collection_id,
        collection_slug=row.collection_slug,
        content_id=row.content_id,
        change_epoch=int(row.change_epoch),
        work_version=int(row.work_version),
        state=row.state,
        attempt_count=int(row.attempt_count),
        next_attempt_at=row.next_attempt_at,
        lease_token=row.lease_token,
        lease_expires_at=row.lease_expires_at,
        last_attempted_at=row.last_attempted_at,
        last_error_code=row.last_error_code,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _operator_item(row: sa.Row[Any]) -> OperatorWorkItem:
    return OperatorWorkItem.from_record(_record(row))


def _reset_to_pending(change_epoch: Any) -> dict[str, Any]:
    """The values that make a row fresh pending work at ``change_epoch``."""
    return {
        "change_epoch": change_epoch,
        "state": "pending",
        "attempt_count": 0,
        "next_attempt_at": db_now(),
        "lease_token": None,
        "lease_expires_at": None,
        "last_attempted_at": None,
        "last_error_code": None,
        "updated_at": db_now(),
    }


def _new_pending_columns(
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
        sa.literal("pending", sa.Text).label("state"),
        sa.literal(0, sa.Integer).label("attempt_count"),
        db_now().label("next_attempt_at"),
        sa.null().label("lease_token"),
        sa.null().label("lease_expires_at"),
        sa.null().label("last_attempted_at"),
        sa.null().label("last_error_code"),
        db_now().label("created_at"),
        db_now().label("updated_at"),
    ]


def _text(value: str) -> sa.ColumnElement[str]:
    return sa.literal(value, sa.Text)


def live_lease_exists(
    collection_id: str, content_id: str, work_version: int, lease_token: str
) -> sa.Exists:
    """True while this exact lease still holds its row: fences writes of a stale holder."""
    return sa.exists(
        sa.select(1).where(
            w.collection_id == collection_id,
            w.content_id == content_id,
            w.work_version == work_version,
            w.state == "leased",
            w.lease_token == lease_token,
            lease_is_live(w.lease_expires_at),
        )
    )


def _lease_expired(column: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    return sa.and_(column.isnot(None), is_due(column))


def _active_status_for(
    collection_id: sa.ColumnElement[Any] | str, slug: sa.ColumnElement[Any] | str
) -> list[sa.ColumnElement[bool]]:
    return [*status_row(collection_id, slug), _status.capture_state == "active"]


# The two statements every item runs are built once, with bound parameters only: building a
# Core statement per call cost more Python time than the database spent executing it.
_ITEM_VERSION = [
    w.collection_id == sa.bindparam("p_collection_id", type_=sa.Text),
    w.content_id == sa.bindparam("p_content_id", type_=sa.Text),
    w.work_version == sa.bindparam("p_work_version", type_=sa.BigInteger),
]
_LIVE_LEASE = [
    *_ITEM_VERSION,
    w.state == "leased",
    w.lease_token == sa.bindparam("p_lease_token", type_=sa.Text),
    lease_is_live(w.lease_expires_at),
]
# A row a claimer may take: due pending or retry work, or a lease whose holder is gone.
_CLAIMABLE = sa.or_(
    sa.and_(w.state.in_(("pending", "retry")), is_due(w.next_attempt_at)),
    sa.and_(w.state == "leased", _lease_expired(w.lease_expires_at)),
)
_CLAIM = (
    work.update()
    .where(*_ITEM_VERSION, _CLAIMABLE)
    .values(
        state="leased",
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


class MediaUsageWorkRepository:
    """All SQL of the work table. Methods mirror the seed's, in snake_case with keywords."""

    def __init__(self, bind: Bind) -> None:
        self.bind = bind
        self._insert = insert_factory(bind)

    # --- reconciliation ------------------------------------------------------------------

    def enqueue_reconciliation_page(
        self,
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
        phase = check.reconciliation_phase(phase)
        ids = check.reconciliation_content_ids(content_ids)

        page = (
            sa.values(sa.column("content_id", sa.Text), name="page")
            .data([(i,) for i in ids])
            .cte("page")
        )
        r = reconciliations.c
        owner_guard = sa.exists(
            sa.select(1)
            .select_from(
                reconciliations.join(
                    index_status,
                    sa.and_(
                        _status.collection_id == r.collection_id,
                        _status.scope_key == r.collection_slug,
                    ),
                ).join(
                    collections,
                    sa.and_(
                        collections.c.id == r.collection_id,
                        collections.c.slug == r.collection_slug,
                    ),
                )
            )
            .where(
                r.collection_id == collection_id,
                r.collection_slug == collection_slug,
                r.run_token == run_token,
                r.target_epoch == epoch,
                r.state == "leased",
                r.phase == phase,
                r.lease_token == lease_token,
                is_live_by_text(r.lease_expires_at),
                _status.adapter_id == ADAPTER_ID,
                _status.scope_type == SCOPE_TYPE,
                _status.capture_state == "active",
                _status.reconciliation_required == 1,
                _status.status == "running",
                _status.cursor == run_token,
                _status.change_epoch == epoch,
                sa.exists(
                    sa.select(1).where(
                        activation.c.task_key == CAPTURE_TASK_KEY,
                        activation.c.state == "active",
                    )
                ),
                ~sa.exists(
                    sa.select(1).where(collection_deletions.c.collection_id == r.collection_id)
                ),
            )
        )
        source = sa.select(
            *_new_pending_columns(
                _text(collection_id),
                _text(collection_slug),
                page.c.content_id,
                sa.literal(epoch, sa.BigInteger),
            )
        ).where(owner_guard)
        insert = self._insert(work).from_select([c.name for c in work.c], source)
        # Conflict: same reset as the capture trigger, but never over newer-epoch work.
        statement = insert.on_conflict_do_update(
            index_elements=[w.collection_id, w.content_id],
            set_={
                "collection_slug": insert.excluded.collection_slug,
                "work_version": w.work_version + 1,
                **_reset_to_pending(insert.excluded.change_epoch),
                "next_attempt_at": insert.excluded.next_attempt_at,
                "updated_at": insert.excluded.updated_at,
            },
            where=w.change_epoch < insert.excluded.change_epoch,
        )
        with transaction(self.bind) as conn:
            conn.execute(statement)

    # --- operator --------------------------------------------------------------------------

    def find_operator_page(
        self,
        *,
        collection_slug: str,
        state: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page | None:
        """A newest-first page of the collection's work, or ``None`` for an unknown collection."""
        check.identifier(collection_slug, "Media usage work listing requires a collection slug.")
        wanted = check.work_state(state)
        page_limit = check.operator_limit(limit)
        position = decode_cursor(cursor)

        with read_transaction(self.bind) as conn:
            collection = conn.execute(
                sa.select(collections.c.id, collections.c.slug).where(
                    collections.c.slug == collection_slug
                )
            ).first()
            if collection is None:
                return None
            candidates: list[OperatorWorkItem] = []
            for one_state in [wanted] if wanted else check.WORK_STATES:
                query = (
                    sa.select(work)
                    .join(collections, _current_identity)
                    .where(
                        w.collection_id == collection.id,
                        w.collection_slug == collection.slug,
                        w.state == one_state,
                    )
                    .order_by(w.updated_at.desc(), w.content_id.desc())
                    .limit(page_limit + 1)
                )
                if position is not None:
                    # Keyset: strictly after the cursor in (updated_at, content_id) desc order.
                    query = query.where(
                        sa.or_(
                            w.updated_at < position.order_value,
                            sa.and_(
                                w.updated_at == position.order_value,
                                w.content_id < position.id,
                            ),
                        )
                    )
                candidates.extend(_operator_item(row) for row in conn.execute(query))

        ordered = sorted(candidates, key=operator_order, reverse=True)
        items = ordered[:page_limit]
        next_cursor = None
        if len(ordered) > page_limit and items:
            next_cursor = encode_cursor(items[-1].updated_at, items[-1].content_id)
        return Page(items=items, next_cursor=next_cursor)

    def retry_operator_work(self, *, collection_id: str, content_id: str) -> OperatorRetryResult:
        """Reopen failed, retrying or abandoned work now; each step is a guarded CAS."""
        collection_id, content_id = check.identity(collection_id, content_id)
        slug = self._active_operator_collection(collection_id)
        if slug is None:
            return OperatorRetryResult("collection_not_found")

        observed = self._find_by_identity(collection_id, content_id)
        if (
            observed is not None
            and observed.state == "pending"
            and observed.collection_slug == slug
        ):
            return OperatorRetryResult("pending", changed=False, work=_operator_item(observed))

        epoch = self._invalidate_coverage_for_operator_retry(
            collection_id, slug, content_id, observed
        )
        if epoch is None:
            return self._operator_retry_lost(collection_id, content_id)
        if observed is not None:
            reopened = self._reopen_observed_work(observed, slug, epoch)
        else:
            reopened = self._create_operator_work(collection_id, slug, content_id, epoch)
        if reopened is not None:
            return OperatorRetryResult("pending", changed=True, work=_operator_item(reopened))
        return self._operator_retry_lost(collection_id, content_id)

    def _active_operator_collection(self, collection_id: str) -> str | None:
        with transaction(self.bind) as conn:
            return conn.execute(
                sa.select(collections.c.slug)
                .join(
                    index_status,
                    sa.and_(
                        _status.collection_id == collections.c.id,
                        _status.scope_key == collections.c.slug,
                    ),
                )
                .where(
                    collections.c.id == collection_id,
                    _status.adapter_id == ADAPTER_ID,
                    _status.scope_type == SCOPE_TYPE,
                    _status.capture_state == "active",
                )
            ).scalar_one_or_none()

    def _find_by_identity(self, collection_id: str, content_id: str) -> sa.Row[Any] | None:
        with transaction(self.bind) as conn:
            return conn.execute(
                sa.select(work).where(w.collection_id == collection_id, w.content_id == content_id)
            ).first()

    def _invalidate_coverage_for_operator_retry(
        self, collection_id: str, slug: str, content_id: str, observed: sa.Row[Any] | None
    ) -> int | None:
        """Bump the epoch (complete → stale), but only if the work row is still as observed."""
        row_of_entry = sa.and_(w.collection_id == _status.collection_id, w.content_id == content_id)
        if observed is not None:
            still_observed = [
                row_of_entry,
                w.work_version == observed.work_version,
                w.state == observed.state,
            ]
            if observed.state == "leased":
                still_observed.append(_lease_expired(w.lease_expires_at))
            work_guard: sa.ColumnElement[bool] = sa.exists(sa.select(1).where(*still_observed))
        else:
            work_guard = ~sa.exists(sa.select(1).where(row_of_entry))
        was_complete = _status.status == "complete"
        statement = (
            index_status.update()
            .where(
                *_active_status_for(collection_id, slug),
                registered(_status.collection_id, _status.scope_key),
                work_guard,
            )
            .values(
                change_epoch=_status.change_epoch + 1,
                status=sa.case((was_complete, "stale"), else_=_status.status),
                completed_at=sa.case((was_complete, sa.null()), else_=_status.completed_at),
                updated_at=db_now(),
            )
            .returning(_status.change_epoch)
        )
        with transaction(self.bind) as conn:
            epoch = conn.execute(statement).scalar_one_or_none()
        return None if epoch is None else int(epoch)

    def _reopen_observed_work(
        self, observed: sa.Row[Any], slug: str, epoch: int
    ) -> sa.Row[Any] | None:
        guards = [
            w.collection_id == observed.collection_id,
            w.content_id == observed.content_id,
            w.work_version == observed.work_version,
            w.state == observed.state,
            sa.exists(
                sa.select(1)
                .select_from(
                    collections.join(
                        index_status,
                        sa.and_(
                            _status.collection_id == collections.c.id,
                            _status.scope_key == collections.c.slug,
                        ),
                    )
                )
                .where(
                    collections.c.id == observed.collection_id,
                    collections.c.slug == slug,
                    _status.adapter_id == ADAPTER_ID,
                    _status.scope_type == SCOPE_TYPE,
                    _status.capture_state == "active",
                    _status.change_epoch == epoch,
                )
            ),
        ]
        if observed.state == "leased":
            guards.append(_lease_expired(w.lease_expires_at))
        statement = (
            work.update()
            .where(*guards)
            .values(
                collection_slug=slug, work_version=w.work_version + 1, **_reset_to_pending(epoch)
            )
            .returning(*work.c)
        )
        with transaction(self.bind) as conn:
            return conn.execute(statement).first()

    def _create_operator_work(
        self, collection_id: str, slug: str, content_id: str, epoch: int
    ) -> sa.Row[Any] | None:
        source = (
            sa.select(
                *_new_pending_columns(
                    _text(collection_id),
                    collections.c.slug,
                    _text(content_id),
                    _status.change_epoch,
                )
            )
            .select_from(
                index_status.join(
                    collections,
                    sa.and_(
                        collections.c.id == _status.collection_id,
                        collections.c.slug == _status.scope_key,
                    ),
                )
            )
            .where(*_active_status_for(collection_id, slug), _status.change_epoch == epoch)
        )
        statement = (
            self._insert(work)
            .from_select([c.name for c in work.c], source)
            .on_conflict_do_nothing(index_elements=[w.collection_id, w.content_id])
            .returning(*work.c)
        )
        with transaction(self.bind) as conn:
            return conn.execute(statement).first()

    def _operator_retry_lost(self, collection_id: str, content_id: str) -> OperatorRetryResult:
        """After a lost race, report what the row is now."""
        if self._active_operator_collection(collection_id) is None:
            return OperatorRetryResult("collection_not_found")
        current = self._find_by_identity(collection_id, content_id)
        if current is not None and current.state == "pending":
            return OperatorRetryResult("pending", changed=False, work=_operator_item(current))
        with transaction(self.bind) as conn:
            live_expiry = conn.execute(
                sa.select(w.lease_expires_at).where(
                    w.collection_id == collection_id,
                    w.content_id == content_id,
                    w.state == "leased",
                    w.lease_expires_at.isnot(None),
                    lease_is_live(w.lease_expires_at),
                )
            ).scalar_one_or_none()
        if live_expiry is not None:
            return OperatorRetryResult("lease_active", lease_expires_at=live_expiry)
        return OperatorRetryResult("conflict")

    # --- processing ------------------------------------------------------------------------

    def find_due_work(self, limit: int) -> list[WorkRecord]:
        """Up to ``limit`` due items in eligibility order (pending, retry, expired leases)."""
        limit = check.due_limit(limit)
        with read_transaction(self.bind) as conn:
            rows = [
                *conn.execute(self._due_query("pending", limit)),
                *conn.execute(self._due_query("retry", limit)),
                *conn.execute(self._due_query("leased", limit)),
            ]
        return sorted((_record(row) for row in rows), key=due_order)[:limit]

    @staticmethod
    def _due_query(state: str, limit: int) -> sa.Select[Any]:
        # Each state walks its own index (work_due or work_lease) in order; LIMIT stops early.
        if state == "leased":
            return (
                sa.select(work)
                .where(w.state == state, is_due(w.lease_expires_at))
                .order_by(w.lease_expires_at, w.collection_id, w.content_id)
                .limit(limit)
            )
        return (
            sa.select(work)
            .where(w.state == state, is_due(w.next_attempt_at))
            .order_by(w.next_attempt_at, w.updated_at, w.collection_id, w.content_id)
            .limit(limit)
        )

    def settle_unusable_work(self, record: WorkRecord, error_code: str) -> str:
        """Settle a claimable item whose content id cannot be used (``is_usable_identifier``).

        Such an item is never claimed, sent or indexed. If its entry is gone it is obsolete
        (deleted); otherwise it fails at once with ``error_code``. Returns ``"obsolete"``,
        ``"failed"``, or ``"superseded"`` when the row moved on since it was read.
        """
        code = check.error_code(error_code)
        content = content_columns(record.collection_slug)
        # The id is bound through StoredText (column types), so a SQLite id that is not UTF-8
        # is matched byte for byte.
        this_item = [
            w.collection_id == record.collection_id,
            w.content_id == record.content_id,
            w.work_version == record.work_version,
            _CLAIMABLE,
        ]
        entry_gone = ~sa.exists(sa.select(1).where(content.c.id == w.content_id))
        with transaction(self.bind) as conn:
            if conn.execute(work.delete().where(*this_item, entry_gone)).rowcount:
                return "obsolete"
            failed = conn.execute(
                work.update()
                .where(*this_item)
                .values(
                    state="failed", attempt_count=w.attempt_count + 1, lease_token=None,
                    lease_expires_at=None, last_attempted_at=db_now(), last_error_code=code,
                    updated_at=db_now(),
                )
            ).rowcount  # fmt: skip
        return "failed" if failed else "superseded"

    def record_unusable_content(
        self, *, collection_id: str, collection_slug: str, content_id: str, change_epoch: int,
        error_code: str,
    ) -> bool:  # fmt: skip
        """A failed row for an entry a rescan found with an unusable id, unless it has a row.

        The reconciliation scan and repair read such ids; they cannot be enqueued as work
        (nothing could claim them), so they are written as failed work for ``work list``.
        """
        code = check.error_code(error_code)
        epoch = check.change_epoch(change_epoch)
        row = sa.select(
            _text(collection_id).label("collection_id"),
            _text(collection_slug).label("collection_slug"),
            sa.literal(content_id, StoredText).label("content_id"),
            sa.literal(epoch, sa.BigInteger).label("change_epoch"),
            sa.literal(1, sa.BigInteger).label("work_version"),
            sa.literal("failed").label("state"),
            sa.literal(1).label("attempt_count"),
            db_now().label("next_attempt_at"),
            db_now().label("last_attempted_at"),
            sa.literal(code).label("last_error_code"),
            db_now().label("created_at"),
            db_now().label("updated_at"),
        ).where(registered(collection_id, collection_slug))
        names = [c.name for c in row.selected_columns]
        insert = self._insert(work).from_select(names, row).on_conflict_do_nothing()
        with transaction(self.bind) as conn:
            return conn.execute(insert).rowcount > 0

    def find_work_for_content(self, collection_slug: str, content_id: str) -> WorkRecord | None:
        message = "Media usage work lookup requires collection and content identity."
        check.identifier(collection_slug, message)
        check.identifier(content_id, message)
        with read_transaction(self.bind) as conn:
            row = conn.execute(
                sa.select(work)
                .join(collections, _current_identity)
                .where(w.collection_slug == collection_slug, w.content_id == content_id)
            ).first()
        return None if row is None else _record(row)

    def claim_work(
        self,
        *,
        collection_id: str,
        content_id: str,
        work_version: int | str,
        lease_duration_seconds: int,
    ) -> WorkRecord | None:
        """Lease the row at exactly this version if it is due; ``None`` when someone else has it."""
        collection_id, content_id = check.identity(collection_id, content_id)
        version = check.work_version(work_version)
        duration = check.duration_seconds(
            lease_duration_seconds, "lease duration", allow_zero=False
        )
        params = {
            "p_collection_id": collection_id,
            "p_content_id": content_id,
            "p_work_version": version,
            "p_duration": duration,
            "p_lease_token": new_ulid(),
        }
        with transaction(self.bind) as conn:
            row = conn.execute(_CLAIM, params).first()
        return None if row is None else _record(row)

    def complete_work(
        self, *, collection_id: str, content_id: str, work_version: int | str, lease_token: str
    ) -> bool:
        """Delete the row if this lease still holds it; ``False`` means the holder was fenced."""
        params = _lease_params(collection_id, content_id, work_version, lease_token)
        with transaction(self.bind) as conn:
            return conn.execute(_COMPLETE, params).rowcount > 0

    def delete_work_through_epoch(self, collection_id: str, max_change_epoch: int | str) -> int:
        check.identifier(collection_id, "Media usage work cleanup requires a collection ID.")
        epoch = check.change_epoch(max_change_epoch)
        with transaction(self.bind) as conn:
            return conn.execute(
                work.delete().where(w.collection_id == collection_id, w.change_epoch <= epoch)
            ).rowcount

    def retry_work(
        self,
        *,
        collection_id: str,
        content_id: str,
        work_version: int | str,
        lease_token: str,
        retry_delay_seconds: int,
        error_code: str,
    ) -> bool:
        delay = check.duration_seconds(retry_delay_seconds, "retry delay", allow_zero=True)
        code = check.error_code(error_code)
        params = _lease_params(collection_id, content_id, work_version, lease_token)
        return self._transition_failure(params, "retry", code, next_attempt_at=db_now(delay))

    def fail_work(
        self,
        *,
        collection_id: str,
        content_id: str,
        work_version: int | str,
        lease_token: str,
        error_code: str,
    ) -> bool:
        code = check.error_code(error_code)
        params = _lease_params(collection_id, content_id, work_version, lease_token)
        return self._transition_failure(params, "failed", code)

    def extend_lease(
        self,
        *,
        collection_id: str,
        content_id: str,
        work_version: int | str,
        lease_token: str,
        lease_duration_seconds: int,
    ) -> str | None:
        """Heartbeat: push a live lease's expiry to now + duration; ``None`` once it is lost."""
        duration = check.duration_seconds(
            lease_duration_seconds, "lease duration", allow_zero=False
        )
        params = _lease_params(collection_id, content_id, work_version, lease_token)
        with transaction(self.bind) as conn:
            return conn.execute(
                work.update()
                .where(*_LIVE_LEASE)
                .values(lease_expires_at=db_now(duration))
                .returning(w.lease_expires_at),
                params,
            ).scalar_one_or_none()

    def find_due_page(
        self, state: str, limit: int, after: WorkRecord | None = None
    ) -> list[WorkRecord]:
        """One keyset page of due rows of one state, in that state's index order.

        The tick walks pages with this so a large backlog costs index range scans, never
        OFFSETs; ``after`` is the last record of the previous page.
        """
        if state not in ("pending", "retry", "leased"):
            raise InvalidArgument("Due pages exist for pending, retry and leased work only.")
        query = self._due_query(state, check.due_limit(limit))
        if after is not None:
            if state == "leased":
                key = sa.tuple_(w.lease_expires_at, w.collection_id, w.content_id)
                position: tuple[str | None, ...] = (
                    after.lease_expires_at,
                    after.collection_id,
                    after.content_id,
                )
            else:
                key = sa.tuple_(w.next_attempt_at, w.updated_at, w.collection_id, w.content_id)
                position = (
                    after.next_attempt_at,
                    after.updated_at,
                    after.collection_id,
                    after.content_id,
                )
            # StoredText: the last id of a page may be one a SQLite host stored as non-UTF-8.
            query = query.where(key > sa.tuple_(*(sa.literal(v, StoredText) for v in position)))
        with read_transaction(self.bind) as conn:
            return [_record(row) for row in conn.execute(query)]

    def oldest_due(self) -> tuple[str, str | None]:
        """The database's now and the earliest due time of any due row (``None`` if none)."""
        # One state per query: min() over a single state's index range is its first entry,
        # while an IN list makes the database aggregate every due row (slow with a backlog).
        candidates = [
            sa.select(sa.func.min(w.next_attempt_at)).where(
                w.state == state, is_due(w.next_attempt_at)
            )
            for state in ("pending", "retry")
        ] + [
            sa.select(sa.func.min(w.lease_expires_at)).where(
                w.state == "leased", is_due(w.lease_expires_at)
            ),
        ]
        with read_transaction(self.bind) as conn:
            now = conn.execute(sa.select(db_now())).scalar_one()
            found = [conn.execute(q).scalar_one_or_none() for q in candidates]
        due = [value for value in found if value is not None]
        return now, min(due) if due else None

    def _transition_failure(
        self, params: dict[str, Any], state: str, code: str, **extra: Any
    ) -> bool:
        statement = (
            work.update()
            .where(*_LIVE_LEASE)
            .values(
                state=state,
                attempt_count=w.attempt_count + 1,
                lease_token=None,
                lease_expires_at=None,
                last_error_code=code,
                updated_at=db_now(),
                **extra,
            )
        )
        with transaction(self.bind) as conn:
            return conn.execute(statement, params).rowcount > 0
