"""Incremental capture lifecycle: the global activation switch and per-collection capture state.

Before activation, collections carry a ``never`` status row with no capture state and content
writes are not captured. ``activate`` (below) installs triggers everywhere and flips capture on;
from then on a new collection gets its triggers in the transaction that creates it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.errors import ActivationError, InvalidSource
from media_usage_worker.domain.host_sources import HostSource
from media_usage_worker.domain.reference_paths import ReferencePath
from media_usage_worker.domain.vocabulary import (
    ActivationState,
    CaptureState,
    CoverageStatus,
    ErrorCode,
)
from media_usage_worker.repository.base import schema
from media_usage_worker.repository.base.clock import db_now
from media_usage_worker.repository.base.predicates import active_status_row, status_row
from media_usage_worker.repository.base.upsert import insert_factory
from media_usage_worker.repository.lifecycle import triggers
from media_usage_worker.repository.registry import host_sources
from media_usage_worker.repository.registry.content_tables import scope_columns
from media_usage_worker.repository.registry.rules_state import note_complete, record_indexed_rules

_status = schema.index_status.c
_activation = schema.activation.c


def is_activation_active(conn: sa.Connection) -> bool:
    state = conn.execute(
        sa.select(_activation.state).where(_activation.task_key == schema.CAPTURE_TASK_KEY)
    ).scalar_one_or_none()
    return state == ActivationState.ACTIVE


def _status_row_for(collection_id: str, slug: str) -> sa.ColumnElement[bool]:
    return sa.and_(*status_row(collection_id, slug))


def _fresh_status_row(collection_id: str, slug: str, capture_state: str | None) -> dict[str, Any]:
    """A never-indexed collection's status row: coverage must come from reconciliation."""
    return {
        "adapter_id": schema.ADAPTER_ID,
        "scope_type": schema.SCOPE_TYPE,
        "scope_key": slug,
        "status": CoverageStatus.NEVER,
        "collection_id": collection_id,
        "change_epoch": 0,
        "reconciliation_required": 1,
        "capture_state": capture_state,
        "updated_at": db_now(),
    }


def prepare_new_collection(conn: sa.Connection, collection_id: str, slug: str) -> None:
    """Insert the new collection's status row (``installing`` while capture is active)."""
    capture_state = CaptureState.INSTALLING if is_activation_active(conn) else None
    conn.execute(
        schema.index_status.insert().values(**_fresh_status_row(collection_id, slug, capture_state))
    )


def install_for_new_collection(conn: sa.Connection, collection_id: str, slug: str) -> None:
    """While capture is active, install the new table's triggers inside the creating transaction."""
    if is_activation_active(conn):
        triggers.install(conn, collection_id, slug)


def finish_new_collection(conn: sa.Connection, collection_id: str, slug: str) -> None:
    """After the registry row exists, turn capture on for the new collection."""
    conn.execute(
        schema.index_status.update()
        .where(
            _status_row_for(collection_id, slug), _status.capture_state == CaptureState.INSTALLING
        )
        .values(capture_state=CaptureState.ACTIVE, cursor=None, updated_at=db_now())
    )


def _prepare_for_activation(conn: sa.Connection, collection_id: str, slug: str) -> None:
    """Upsert the status row to ``installing``; coverage so far is not trusted (reconcile)."""
    insert = insert_factory(conn.engine)(schema.index_status)
    statement = insert.values(**_fresh_status_row(collection_id, slug, CaptureState.INSTALLING))
    was_trusted = _status.status.in_((CoverageStatus.COMPLETE, CoverageStatus.RUNNING))
    statement = statement.on_conflict_do_update(
        index_elements=[_status.adapter_id, _status.scope_type, _status.scope_key],
        set_={
            "status": sa.case((was_trusted, CoverageStatus.STALE.value), else_=_status.status),
            "completed_at": sa.case((was_trusted, sa.null()), else_=_status.completed_at),
            "cursor": None,
            "collection_id": collection_id,
            "reconciliation_required": 1,
            "capture_state": CaptureState.INSTALLING,
            "updated_at": db_now(),
        },
        where=sa.and_(
            sa.or_(_status.collection_id.is_(None), _status.collection_id == collection_id),
            sa.or_(_status.capture_state.is_(None), _status.capture_state != CaptureState.DELETING),
        ),
    )
    if conn.execute(statement.returning(_status.scope_key)).first() is None:
        raise ActivationError(
            f"Collection {slug!r} has a status row for another collection id or is being "
            "deleted; activation aborted."
        )


def registered_collections(conn: sa.Connection) -> list[tuple[str, str]]:
    """Every registered collection's ``(id, slug)``, by slug."""
    registry = schema.collections.c
    return [
        (collection_id, slug)
        for collection_id, slug in conn.execute(
            sa.select(registry.id, registry.slug).order_by(registry.slug)
        )
    ]


def table_exists(conn: sa.Connection, table: str) -> bool:
    return sa.inspect(conn).has_table(table)


def switch_capture_on(conn: sa.Connection) -> None:
    """The global switch to ``active`` (once: an active switch keeps its activation time)."""
    conn.execute(
        schema.activation.update()
        .where(
            _activation.task_key == schema.CAPTURE_TASK_KEY,
            _activation.state != ActivationState.ACTIVE,
        )
        .values(
            state=ActivationState.ACTIVE,
            activated_at=db_now(),
            drain_confirmed_at=db_now(),
            collection_cursor=None,
            lease_token=None,
            lease_expires_at=None,
            last_error_code=None,
            updated_at=db_now(),
        )
    )


def capture_collection(conn: sa.Connection, collection_id: str, slug: str) -> None:
    """What ``activate`` does for one collection, in the caller's transaction: its triggers,
    and a status row with capture active (one not captured before needs reconciling)."""
    if not _capture_is_active(conn, collection_id, slug):
        _prepare_for_activation(conn, collection_id, slug)
    triggers.install(conn, collection_id, slug)
    conn.execute(
        schema.index_status.update()
        .where(_status_row_for(collection_id, slug))
        .values(capture_state=CaptureState.ACTIVE, updated_at=db_now())
        .where(_status.capture_state != CaptureState.ACTIVE)
    )


def uncaptured_collections(conn: sa.Connection) -> list[tuple[str, str]]:
    """The ``(id, slug)`` of each registered collection with no active capture that is not
    being deleted: those the CMS registered itself after activation."""
    registry = schema.collections.c
    uncaptured = (
        sa.select(registry.id, registry.slug)
        .where(
            ~sa.exists(sa.select(1).where(*active_status_row(registry.id, registry.slug))),
            ~sa.exists(
                sa.select(1).where(schema.collection_deletions.c.collection_id == registry.id)
            ),
        )
        .order_by(registry.slug)
    )
    return [(collection_id, slug) for collection_id, slug in conn.execute(uncaptured)]


def _capture_is_active(conn: sa.Connection, collection_id: str, slug: str) -> bool:
    return (
        conn.execute(
            sa.select(_status.capture_state).where(*active_status_row(collection_id, slug))
        ).first()
        is not None
    )


def deletions_in_progress(conn: sa.Connection) -> int:
    return conn.execute(
        sa.select(sa.func.count()).select_from(schema.collection_deletions)
    ).scalar_one()


def drop_all_work(conn: sa.Connection) -> None:
    """Every queued work row and reconciliation run (with its key ranges): with capture off
    nothing processes them."""
    conn.execute(schema.work.delete())
    # Coordinators first: a scan step handing out ranges holds its coordinator's row, so this
    # waits for it, and the ranges it wrote are then seen and deleted too.
    conn.execute(schema.reconciliations.delete())
    conn.execute(schema.backfill_ranges.delete())


def distrust_all_coverage(conn: sa.Connection) -> None:
    """Every scope's coverage ``stale`` and to reconcile (a never-indexed one stays ``never``),
    its capture state gone and its epoch moved on."""
    never = _status.status == CoverageStatus.NEVER
    conn.execute(
        schema.index_status.update()
        .where(_status.adapter_id == schema.ADAPTER_ID, _status.scope_type == schema.SCOPE_TYPE)
        .values(
            capture_state=None,
            status=sa.case((never, _status.status), else_=CoverageStatus.STALE.value),
            last_error_code=sa.case((never, _status.last_error_code), else_=ErrorCode.STALE),
            completed_at=None,
            cursor=None,
            change_epoch=_status.change_epoch + 1,
            reconciliation_required=1,
            updated_at=db_now(),
        )
    )


def switch_capture_off(conn: sa.Connection) -> None:
    """The global switch back to ``expanded``."""
    conn.execute(
        schema.activation.update()
        .where(_activation.task_key == schema.CAPTURE_TASK_KEY)
        .values(
            state=ActivationState.EXPANDED,
            activated_at=None,
            drain_confirmed_at=None,
            collection_cursor=None,
            lease_token=None,
            lease_expires_at=None,
            updated_at=db_now(),
        )
    )


def capture_source(conn: sa.Connection, source: HostSource) -> None:
    """What ``activate`` does for a collection, for a source beyond content (in the
    caller's transaction): triggers, and its coverage row made active."""
    try:
        host_sources.check_against_catalog(conn, source)
    except InvalidSource as exc:
        raise ActivationError(
            f"Source {source.label!r} cannot be captured: {exc} Restore the table or remove "
            "the source, then activate again."
        ) from None
    cid, scope = source.collection_id, source.scope_key
    was_active = _capture_is_active(conn, cid, scope)
    if not was_active:
        _prepare_for_activation(conn, cid, scope)
    triggers.install_source(conn, source)
    conn.execute(
        schema.index_status.update()
        .where(_status_row_for(cid, scope), _status.capture_state != CaptureState.ACTIVE)
        .values(capture_state=CaptureState.ACTIVE, updated_at=db_now())
    )
    if not was_active:
        complete_if_nothing_to_index(conn, source)


def complete_if_nothing_to_index(conn: sa.Connection, source: HostSource) -> None:
    """Coverage ``complete`` at once for a source whose table has no row and of which the
    index holds nothing: there is nothing to reconcile. Sound because its triggers are in
    place in this transaction: on PostgreSQL creating them waited for the table's writers in
    flight and keeps new ones out until the commit; SQLite has one writer at a time."""
    rows = scope_columns(source.scope_key)
    if conn.execute(sa.select(1).select_from(rows).limit(1)).first() is not None:
        return
    indexed = schema.sources.c.collection_id == source.collection_id
    if conn.execute(sa.select(1).where(indexed).limit(1)).first() is not None:
        return
    conn.execute(
        schema.index_status.update()
        .where(
            _status_row_for(source.collection_id, source.scope_key),
            _status.capture_state == CaptureState.ACTIVE,
        )
        .values(
            status=CoverageStatus.COMPLETE, completed_at=db_now(), started_at=db_now(),
            reconciliation_required=0, last_error_code=None, cursor=None, updated_at=db_now(),
        )
    )  # fmt: skip
    record_indexed_rules(conn, source.collection_id)
    note_complete(conn, [source.collection_id])


def insert_reference_paths(
    conn: sa.Connection, collection_id: str, paths: Sequence[ReferencePath]
) -> None:
    for path in paths:
        conn.execute(
            schema.reference_paths.insert().values(
                collection_id=collection_id, path=path.text, field_slug=path.field_slug
            )
        )


def insert_status_row(
    conn: sa.Connection, source: HostSource, capture: CaptureState | None
) -> None:
    """A newly declared source's coverage row: ``never`` until reconciled."""
    conn.execute(
        schema.index_status.insert().values(
            **_fresh_status_row(source.collection_id, source.scope_key, capture)
        )
    )


# The flows made of these statements moved up to ``pipeline.capture``; their names stay
# importable from here for code written before the move (looked up on first use only, so this
# module imports nothing above the data layer).
_FLOWS = frozenset(
    {
        "activate",
        "deactivate",
        "capture_new_collections",
        "declare_source",
        "remove_declared_source",
    }
)


def __getattr__(name: str) -> Any:
    if name in _FLOWS:
        from media_usage_worker.pipeline import capture

        return getattr(capture, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
