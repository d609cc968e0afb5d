"""Collection deletion tombstones and the statements of each phase (as emdash 0.34 deletes one).

A tombstone row stands for one collection being deleted. It is claimed with a lease, phase by
phase; every write of a phase is one transaction that first moves the held tombstone on (its
phase or cursor), guarded by the lease, so a step that outlived its lease changes nothing and a
step killed half-way is rolled back whole. The order of the phases and the decisions between
them are in ``media_usage_worker.pipeline.deletion`` (docs/design.md, "Deleting a collection").
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain import deletion as deletion_policy
from media_usage_worker.domain.cursor import decode_cursor, deletion_scope, encode_cursor
from media_usage_worker.domain.errors import DeletionConflict
from media_usage_worker.domain.vocabulary import (
    CaptureState,
    DeletionPhase,
    DeletionState,
    DeletionStepEnd,
    ErrorCode,
)
from media_usage_worker.repository.base.clock import db_now, is_live_by_text
from media_usage_worker.repository.base.db import Bind, read_transaction, transaction
from media_usage_worker.repository.base.predicates import status_row
from media_usage_worker.repository.base.schema import (
    backfill_ranges,
    collection_deletions,
    collections,
    generation_writes,
    index_status,
    occurrences,
    reconciliations,
    reference_paths,
    rules_state,
    sources,
    work,
)
from media_usage_worker.repository.base.schema import (
    fields as field_rows,
)
from media_usage_worker.repository.base.upsert import insert_factory_for
from media_usage_worker.repository.registry.content_tables import content_table_name
from media_usage_worker.repository.work_queue.leases import LeasedRows, leased_record, unleased

_d = collection_deletions.c
_w = work.c
_s = sources.c
_o = occurrences.c
# Tombstones are claimed, held and given back like every leased row (repository.leases).
_LEASES = LeasedRows(collection_deletions, DeletionState.LEASED)


@dataclass(frozen=True)
class Tombstone:
    """A deletion as its row holds it (the lease token is never shown to operators)."""

    collection_id: str
    collection_slug: str
    force_delete: bool
    state: DeletionState
    phase: DeletionPhase
    work_cursor: str | None
    source_key: str | None
    occurrence_cursor: str | None
    attempt_count: int
    next_attempt_at: str
    lease_token: str | None
    last_error_code: str | None
    updated_at: str

    @classmethod
    def from_row(cls, row: sa.Row[Any]) -> Tombstone:
        return leased_record(
            cls, row, force_delete=bool(row.force_delete), state=DeletionState(row.state),
            phase=DeletionPhase(row.phase), attempt_count=int(row.attempt_count),
        )  # fmt: skip

    def shown(self) -> dict[str, Any]:
        """What operators see: everything but the lease token."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "lease_token"}


# --- finding, creating, claiming -----------------------------------------------------------


def find(
    bind: Bind, *, slug: str | None = None, collection_id: str | None = None
) -> Tombstone | None:
    where = _d.collection_slug == slug if slug is not None else _d.collection_id == collection_id
    with read_transaction(bind) as conn:
        row = conn.execute(sa.select(collection_deletions).where(where)).first()
    return None if row is None else Tombstone.from_row(row)


def create(bind: Bind, collection_id: str, slug: str, force: bool) -> Tombstone:
    """The collection's tombstone, new or standing; another identity or force flag is refused."""
    with transaction(bind) as conn:
        conn.execute(
            _insert(conn)
            .values(
                collection_id=collection_id, collection_slug=slug, force_delete=int(force),
                next_attempt_at=db_now(), created_at=db_now(), updated_at=db_now(),
            )
            .on_conflict_do_nothing()
        )  # fmt: skip
        row = conn.execute(
            sa.select(collection_deletions).where(
                sa.or_(_d.collection_id == collection_id, _d.collection_slug == slug)
            )
        ).all()
    standing = [Tombstone.from_row(r) for r in row]
    if len(standing) != 1 or (standing[0].collection_id, standing[0].collection_slug) != (
        collection_id,
        slug,
    ):
        raise DeletionConflict(f"Collection {slug!r} has a deletion under another identity.")
    if standing[0].force_delete != force:
        raise DeletionConflict(
            f"Collection {slug!r} is already being deleted "
            f"{'with' if standing[0].force_delete else 'without'} --force."
        )
    return standing[0]


def _insert(conn: sa.Connection) -> Any:
    return insert_factory_for(conn.dialect.name)(collection_deletions)


def due_ids(bind: Bind, limit: int) -> list[str]:
    return _LEASES.due_ids(bind, limit)


def claim(bind: Bind, collection_id: str, lease_seconds: int) -> Tombstone | None:
    """Lease the tombstone if it is (still) due or its holder's lease expired."""
    row = _LEASES.claim(bind, collection_id, lease_seconds)
    return None if row is None else Tombstone.from_row(row)


# --- the held tombstone --------------------------------------------------------------------


def _held(t: Tombstone) -> list[sa.ColumnElement[bool]]:
    return _LEASES.held(t.collection_id, t.lease_token)


def _move_held(conn: sa.Connection, t: Tombstone, **values: Any) -> Tombstone | None:
    """Move the held tombstone on (one guarded statement; also the transaction's lock on it)."""
    row = _LEASES.move_held(conn, t.collection_id, t.lease_token, **values)
    return None if row is None else Tombstone.from_row(row)


def _checkpoint(conn: sa.Connection, t: Tombstone, phase: DeletionPhase) -> Tombstone | None:
    """The next phase, from its start: cursors cleared, the failure count reset."""
    return _move_held(
        conn, t, phase=phase, work_cursor=None, source_key=None, occurrence_cursor=None,
        attempt_count=0, last_error_code=None,
    )  # fmt: skip


# What a step returns: the tombstone to go on with, or how the deletion's steps ended.
Step = Tombstone | DeletionStepEnd


def _step(moved: Tombstone | None) -> Step:
    return DeletionStepEnd.LEASE_LOST if moved is None else moved


def release(bind: Bind, t: Tombstone, delay: int = 0) -> bool:
    """Give the lease back; due again in ``delay`` seconds."""
    with transaction(bind) as conn:
        return _move_held(conn, t, **unleased(DeletionState.PENDING, delay)) is not None


def record_failure(bind: Bind, t: Tombstone) -> DeletionState | None:
    """A step failed: retried after ``min(900, 30·2^attempt)`` s, failed for good at the fifth
    attempt. ``None`` when the lease was already lost."""
    terminal = deletion_policy.is_terminal(t.attempt_count)
    state = DeletionState.FAILED if terminal else DeletionState.RETRY
    delay = deletion_policy.retry_delay_seconds(t.attempt_count)
    with transaction(bind) as conn:
        moved = _move_held(
            conn, t, **unleased(state, delay), attempt_count=_d.attempt_count + 1,
            last_error_code=ErrorCode.COLLECTION_DELETION_FAILED,
        )  # fmt: skip
    return None if moved is None else state


# --- front phases --------------------------------------------------------------------------


def _quoted_table(conn: sa.Connection, slug: str) -> str:
    return conn.dialect.identifier_preparer.quote(content_table_name(slug))


def fence(bind: Bind, t: Tombstone) -> Step:
    """Stop content writes: capture ``deleting`` (the triggers then refuse every write).

    Returns the tombstone at ``registry``; ``has_content`` when live entries remain and the
    deletion is not forced (the tombstone is removed, nothing else changed).
    """
    with transaction(bind) as conn:
        if _move_held(conn, t) is None:
            return DeletionStepEnd.LEASE_LOST
        table = content_table_name(t.collection_slug)
        exists = sa.inspect(conn).has_table(table)
        if exists and conn.dialect.name == "postgresql":
            # Waits for the writers in flight and keeps new ones out until this commits: each
            # write either committed (and was captured) before the fence, or fails after it.
            quoted = _quoted_table(conn, t.collection_slug)
            conn.exec_driver_sql(f"LOCK TABLE {quoted} IN SHARE ROW EXCLUSIVE MODE")
        if exists and not t.force_delete:
            quoted = _quoted_table(conn, t.collection_slug)
            live = conn.exec_driver_sql(
                f"SELECT 1 FROM {quoted} WHERE deleted_at IS NULL LIMIT 1"  # noqa: S608
            ).first()
            if live is not None:
                conn.execute(collection_deletions.delete().where(*_held(t)))
                return DeletionStepEnd.HAS_CONTENT
        conn.execute(
            index_status.update()
            .where(*status_row(t.collection_id, t.collection_slug))
            .values(capture_state=CaptureState.DELETING, updated_at=db_now())
        )
        return _step(_checkpoint(conn, t, DeletionPhase.REGISTRY))


def drop_registry(bind: Bind, t: Tombstone) -> Step:
    """The collection leaves the registry, with its fields and declared rules."""
    with transaction(bind) as conn:
        moved = _checkpoint(conn, t, DeletionPhase.TABLE)
        if moved is None:
            return DeletionStepEnd.LEASE_LOST
        # The registry row first: a rules change holding it (FOR SHARE, repository.rules)
        # commits its rules rows before this step removes them, instead of deadlocking on them.
        conn.execute(
            sa.select(collections.c.id).where(collections.c.id == t.collection_id).with_for_update()
        )
        for table, column in ((field_rows, field_rows.c.collection_id),
                              (reference_paths, reference_paths.c.collection_id),
                              (rules_state, rules_state.c.collection_id)):  # fmt: skip
            conn.execute(table.delete().where(column == t.collection_id))
        conn.execute(
            collections.delete().where(
                collections.c.id == t.collection_id, collections.c.slug == t.collection_slug
            )
        )
        return _step(moved)


def drop_table(bind: Bind, t: Tombstone) -> Step:
    """``DROP TABLE ec_<slug>``: the content and its capture triggers go with it."""
    with transaction(bind) as conn:
        moved = _checkpoint(conn, t, DeletionPhase.WORK)
        if moved is None:
            return DeletionStepEnd.LEASE_LOST
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {_quoted_table(conn, t.collection_slug)}")
        return _step(moved)


# --- back phases: one batch each -----------------------------------------------------------


def delete_work_batch(bind: Bind, t: Tombstone, limit: int) -> Step:
    """Up to ``limit`` work rows, by content id after the cursor; at the end, ``sources``."""
    with transaction(bind) as conn:
        ids = list(
            conn.execute(
                sa.select(_w.content_id)
                .where(_w.collection_id == t.collection_id,
                       _w.content_id > t.work_cursor if t.work_cursor is not None else sa.true())
                .order_by(_w.content_id)
                .limit(limit)
            ).scalars()
        )  # fmt: skip
        if not ids:
            return _step(_checkpoint(conn, t, DeletionPhase.SOURCES))
        moved = _move_held(conn, t, work_cursor=ids[-1])
        if moved is not None:
            conn.execute(
                work.delete().where(_w.collection_id == t.collection_id, _w.content_id.in_(ids))
            )
        return _step(moved)


def _collection_sources(t: Tombstone) -> list[sa.ColumnElement[bool]]:
    """The collection's sources: by id, and legacy ones (no id yet) by slug."""
    return [
        _s.source_type == "content",
        sa.or_(
            _s.collection_id == t.collection_id,
            sa.and_(_s.collection_id.is_(None), _s.collection_slug == t.collection_slug),
        ),
    ]


def delete_sources_batch(bind: Bind, t: Tombstone, limit: int) -> Step:
    """Up to ``limit`` occurrences: every whole source that fits, in key order, or else a part
    of the first one (resumed after the cursor), whose row goes with its last occurrences.
    At the end, ``status``."""
    with transaction(bind) as conn:
        if t.source_key is not None:
            return _step(_drain_one_source(conn, t, t.source_key, limit))
        keys = list(
            conn.execute(
                sa.select(_s.source_key)
                .where(*_collection_sources(t))
                .order_by(_s.source_key)
                .limit(limit)
            ).scalars()
        )
        if not keys:
            return _step(_checkpoint(conn, t, DeletionPhase.STATUS))
        whole = _whole_sources(conn, keys, limit)
        if not whole:
            return _step(_drain_one_source(conn, t, keys[0], limit))
        moved = _move_held(conn, t)
        if moved is not None:
            _delete_sources(conn, whole)
        return _step(moved)


def _whole_sources(conn: sa.Connection, keys: list[str], limit: int) -> list[str]:
    """The longest run of ``keys`` (in order) whose occurrences number at most ``limit``."""
    counts: dict[str, int] = {
        key: count
        for key, count in conn.execute(
            sa.select(_o.source_key, sa.func.count())
            .where(_o.source_key.in_(keys))
            .group_by(_o.source_key)
        )
    }
    taken: list[str] = []
    total = 0
    for key in keys:
        total += counts.get(key, 0)
        if total > limit:
            break
        taken.append(key)
    return taken


def _drain_one_source(conn: sa.Connection, t: Tombstone, key: str, limit: int) -> Tombstone | None:
    """``limit`` occurrences of a source too large for one step; the rest of it, and its row,
    once fewer remain."""
    after = _o.id > t.occurrence_cursor if t.occurrence_cursor is not None else sa.true()
    ids = list(
        conn.execute(
            sa.select(_o.id).where(_o.source_key == key, after).order_by(_o.id).limit(limit)
        ).scalars()
    )
    if len(ids) == limit:
        moved = _move_held(conn, t, source_key=key, occurrence_cursor=ids[-1])
        if moved is not None:
            conn.execute(occurrences.delete().where(_o.id.in_(ids)))
        return moved
    moved = _move_held(conn, t, source_key=None, occurrence_cursor=None)
    if moved is not None:
        _delete_sources(conn, [key])
    return moved


def _delete_sources(conn: sa.Connection, keys: list[str]) -> None:
    """Sources with their occurrences and generation records."""
    conn.execute(occurrences.delete().where(_o.source_key.in_(keys)))
    conn.execute(generation_writes.delete().where(generation_writes.c.source_key.in_(keys)))
    conn.execute(sources.delete().where(_s.source_key.in_(keys)))


def _status_leftovers(conn: sa.Connection, t: Tombstone) -> bool:
    """Rows of the collection in the project's own tables after its status phase: a rules
    change or a reconciliation that raced the deletion may have written one."""
    left = [
        sa.exists(sa.select(1).where(reconciliations.c.collection_id == t.collection_id)),
        sa.exists(sa.select(1).where(backfill_ranges.c.collection_id == t.collection_id)),
        sa.exists(sa.select(1).where(*status_row(t.collection_id, t.collection_slug))),
        sa.exists(sa.select(1).where(rules_state.c.collection_id == t.collection_id)),
        sa.exists(sa.select(1).where(reference_paths.c.collection_id == t.collection_id)),
    ]
    return bool(conn.execute(sa.select(sa.or_(*left))).scalar_one())


def _leftovers(conn: sa.Connection, t: Tombstone) -> bool:
    work_left = sa.exists(sa.select(1).where(_w.collection_id == t.collection_id))
    sources_left = sa.exists(sa.select(1).where(*_collection_sources(t)))
    return bool(conn.execute(sa.select(sa.or_(work_left, sources_left))).scalar_one())


def clear_status(bind: Bind, t: Tombstone) -> Step:
    """Nothing of the collection left but its coverage: the reconciliation and status rows go.
    Anything a crashed step left behind sends the deletion back to ``work``."""
    with transaction(bind) as conn:
        if _leftovers(conn, t):
            return _step(_checkpoint(conn, t, DeletionPhase.WORK))
        moved = _checkpoint(conn, t, DeletionPhase.FINALIZE)
        if moved is not None:
            conn.execute(
                reconciliations.delete().where(reconciliations.c.collection_id == t.collection_id)
            )
            conn.execute(
                index_status.delete().where(*status_row(t.collection_id, t.collection_slug))
            )
            for table in (rules_state, reference_paths, backfill_ranges):
                conn.execute(table.delete().where(table.c.collection_id == t.collection_id))
        return _step(moved)


def finalize(bind: Bind, t: Tombstone) -> Step:
    """Everything is gone: the tombstone goes too (the slug is free again). Something left
    sends the deletion back to the phase that removes it (the tombstone there is returned)."""
    with transaction(bind) as conn:
        registered = conn.execute(sa.select(1).where(collections.c.id == t.collection_id)).first()
        table_left = sa.inspect(conn).has_table(content_table_name(t.collection_slug))
        back = (
            DeletionPhase.REGISTRY if registered
            else DeletionPhase.TABLE if table_left
            else DeletionPhase.WORK if _leftovers(conn, t)
            else DeletionPhase.STATUS if _status_leftovers(conn, t)
            else None
        )  # fmt: skip
        if back is not None:
            return _step(_checkpoint(conn, t, back))
        gone = conn.execute(collection_deletions.delete().where(*_held(t))).rowcount
        return DeletionStepEnd.FINISHED if gone else DeletionStepEnd.LEASE_LOST


# --- operators -----------------------------------------------------------------------------


def standing(bind: Bind) -> list[Tombstone]:
    """Every deletion under way, by slug (what ``status`` shows)."""
    with read_transaction(bind) as conn:
        rows = conn.execute(sa.select(collection_deletions).order_by(_d.collection_slug))
        return [Tombstone.from_row(r) for r in rows]


@dataclass(frozen=True)
class DeletionPage:
    items: list[Tombstone]
    next_cursor: str | None


def page(bind: Bind, state: DeletionState | None, limit: int, cursor: str | None) -> DeletionPage:
    """Deletions in ``state`` (all when ``None``), newest change first."""
    scope = deletion_scope(state)
    position = decode_cursor(cursor, scope=scope)
    query = sa.select(collection_deletions)
    if state is not None:
        query = query.where(_d.state == state)
    if position is not None:
        query = query.where(
            sa.tuple_(_d.updated_at, _d.collection_id)
            < sa.tuple_(sa.literal(position.order_value), sa.literal(position.id))
        )
    query = query.order_by(_d.updated_at.desc(), _d.collection_id.desc()).limit(limit + 1)
    with read_transaction(bind) as conn:
        rows = [Tombstone.from_row(r) for r in conn.execute(query)]
    more = len(rows) > limit
    rows = rows[:limit]
    last = rows[-1] if rows and more else None
    return DeletionPage(
        rows, encode_cursor(last.updated_at, last.collection_id, scope=scope) if last else None
    )


def reopen(bind: Bind, slug: str) -> Tombstone | None:
    """A failed, retrying or abandoned deletion is due now; ``None`` if there is none to reopen
    (no such deletion, or it is pending or held by a live lease)."""
    stuck = sa.or_(
        _d.state.in_((DeletionState.FAILED, DeletionState.RETRY)),
        sa.and_(_d.state == DeletionState.LEASED, ~is_live_by_text(_d.lease_expires_at)),
    )
    with transaction(bind) as conn:
        row = conn.execute(
            collection_deletions.update()
            .where(_d.collection_slug == slug, stuck)
            .values(
                state=DeletionState.PENDING, attempt_count=0, lease_token=None,
                lease_expires_at=None, next_attempt_at=db_now(), updated_at=db_now(),
            )
            .returning(*collection_deletions.c)
        ).first()  # fmt: skip
    return None if row is None else Tombstone.from_row(row)
