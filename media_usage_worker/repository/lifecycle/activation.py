"""Incremental capture lifecycle: the global activation switch and per-collection capture state.

Before activation, collections carry a ``never`` status row with no capture state and content
writes are not captured. ``activate`` (below) installs triggers everywhere and flips capture on;
from then on a new collection gets its triggers in the transaction that creates it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.content_model import COLLECTION_SLUG_PATTERN
from media_usage_worker.domain.errors import ActivationError, InvalidSource
from media_usage_worker.domain.host_sources import ColumnKind, HostSource
from media_usage_worker.domain.reference_paths import ReferencePath
from media_usage_worker.domain.vocabulary import (
    ActivationState,
    CaptureState,
    CoverageStatus,
    ErrorCode,
)
from media_usage_worker.repository.base import schema
from media_usage_worker.repository.base.clock import db_now
from media_usage_worker.repository.base.db import read_transaction, transaction
from media_usage_worker.repository.base.predicates import active_status_row, status_row
from media_usage_worker.repository.base.upsert import insert_factory
from media_usage_worker.repository.lifecycle import triggers
from media_usage_worker.repository.registry import host_sources
from media_usage_worker.repository.registry.content_tables import content_table_name, scope_columns
from media_usage_worker.repository.registry.rules_state import record_indexed_rules

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


def activate(engine: sa.Engine) -> list[str]:
    """Turn incremental capture on for every collection, in one transaction.

    Installs (or replaces) the capture triggers of each ``ec_<slug>`` table, marks each
    collection's capture ``active`` with ``reconciliation_required = 1`` so content written
    before now is picked up by reconciliation, and flips the global switch. On an already
    active database it re-verifies every collection: collections whose capture is active only
    get their triggers replaced; anything else is brought to active the same way.
    Returns the slugs it covered.
    """
    registry = schema.collections.c
    with transaction(engine) as conn:
        rows = conn.execute(sa.select(registry.id, registry.slug).order_by(registry.slug)).all()
        for collection_id, slug in rows:
            # A host may register any slug; only one that is a safe identifier becomes SQL.
            if not (isinstance(slug, str) and COLLECTION_SLUG_PATTERN.fullmatch(slug)):
                raise ActivationError(
                    f"Collection slug {slug!r} (id {collection_id!r}) is not one this project "
                    f"can capture: it must match ^{COLLECTION_SLUG_PATTERN.pattern}$. Rename "
                    "or remove the collection, then activate again."
                )
            if not sa.inspect(conn).has_table(content_table_name(slug)):
                raise ActivationError(f"Collection {slug!r} has no ec_{slug} table.")
            capture_collection(conn, collection_id, slug)
        for source in host_sources.list_sources(conn):
            capture_source(conn, source)
        triggers.install_revisions(conn)
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
    return [slug for _, slug in rows]


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


def capture_new_collections(engine: sa.Engine) -> list[str]:
    """Capture every collection the CMS registered itself after activation (a registry row
    and its content table, no capture yet), as ``activate`` would; nothing before activation.
    Its slugs. A slug that is not a safe identifier, or a collection being deleted, is left
    alone (its coverage stays ``never``: unused does not answer over it)."""
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
    # Every reconcile tick asks: read first, and take a write transaction only to act.
    with read_transaction(engine) as conn:
        if not is_activation_active(conn) or conn.execute(uncaptured).first() is None:
            return []
    captured = []
    with transaction(engine) as conn:
        if not is_activation_active(conn):
            return []
        for collection_id, slug in conn.execute(uncaptured).all():
            safe = isinstance(slug, str) and COLLECTION_SLUG_PATTERN.fullmatch(slug)
            if safe and sa.inspect(conn).has_table(content_table_name(slug)):
                capture_collection(conn, collection_id, slug)
                captured.append(slug)
    return captured


def _capture_is_active(conn: sa.Connection, collection_id: str, slug: str) -> bool:
    return (
        conn.execute(
            sa.select(_status.capture_state).where(*active_status_row(collection_id, slug))
        ).first()
        is not None
    )


def deactivate(engine: sa.Engine) -> list[str]:
    """Turn incremental capture off for every collection, in one transaction.

    The way back to a database ``db downgrade`` accepts. Every capture trigger is dropped, so
    host writes are no longer captured (nor refused); the queued work and reconciliation runs
    are deleted, since nothing would process them; every collection's coverage stops being
    trusted (``stale`` with ``reconciliation_required``; a never-indexed one stays ``never``)
    and loses its capture state; the global switch goes back to ``expanded``. The index rows
    stay: a later ``activate`` reconciles every collection again. Refused while a collection
    deletion is in progress. Returns the slugs whose triggers were dropped.
    """
    registry = schema.collections.c
    with transaction(engine) as conn:
        deleting = conn.execute(
            sa.select(sa.func.count()).select_from(schema.collection_deletions)
        ).scalar_one()
        if deleting:
            raise ActivationError("A collection deletion is in progress; deactivation refused.")
        slugs = [
            slug
            for slug in conn.execute(sa.select(registry.slug).order_by(registry.slug)).scalars()
            # A slug activation refused never got triggers, and never becomes SQL here.
            if isinstance(slug, str) and COLLECTION_SLUG_PATTERN.fullmatch(slug)
            and sa.inspect(conn).has_table(content_table_name(slug))
        ]  # fmt: skip
        # Triggers first: dropping one waits for the table's writers in flight (PostgreSQL's
        # lock), so the work rows they queued exist by the time they are deleted below.
        for slug in slugs:
            triggers.remove(conn, slug)
        for source in host_sources.list_sources(conn):
            if sa.inspect(conn).has_table(source.table):
                triggers.remove_source(conn, source)
        triggers.remove_revisions(conn)
        conn.execute(schema.work.delete())
        conn.execute(schema.reconciliations.delete())
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
    return slugs


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
        _complete_if_nothing_to_index(conn, source)


def _complete_if_nothing_to_index(conn: sa.Connection, source: HostSource) -> None:
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


def declare_source(
    engine: sa.Engine, source: HostSource, paths: Sequence[ReferencePath] = ()
) -> None:
    """Register a host table as a source, in one transaction: checked against the catalog,
    stored with the reference paths declared into its JSON columns, and (while capture is
    active) captured, its coverage ``never`` until a reconciliation has indexed the rows it
    already has."""
    json_columns = {name for name, kind in source.columns if kind == ColumnKind.JSON}
    for path in paths:
        if path.field_slug not in json_columns:
            raise InvalidSource(
                f"Reference path {path.text!r} must start with one of the source's JSON "
                f"columns ({', '.join(sorted(json_columns)) or 'it has none'})."
            )
    with transaction(engine) as conn:
        host_sources.check_declarable(conn, source)
        host_sources.insert_source(conn, source)
        for path in paths:
            conn.execute(
                schema.reference_paths.insert().values(
                    collection_id=source.collection_id, path=path.text,
                    field_slug=path.field_slug,
                )
            )  # fmt: skip
        capture = CaptureState.ACTIVE if is_activation_active(conn) else None
        conn.execute(
            schema.index_status.insert().values(
                **_fresh_status_row(source.collection_id, source.scope_key, capture)
            )
        )
        if capture is not None:
            triggers.install_source(conn, source)
            _complete_if_nothing_to_index(conn, source)


def remove_declared_source(engine: sa.Engine, table: str) -> HostSource:
    """Remove a declared source and everything of it, in one transaction: its triggers (the
    drop waits for the table's writers in flight), its work, coverage and index rows."""
    with transaction(engine) as conn:
        source = host_sources.require_declared(conn, table)
        if sa.inspect(conn).has_table(source.table):
            triggers.remove_source(conn, source)
        host_sources.delete_index_of(conn, source.collection_id)
    return source
