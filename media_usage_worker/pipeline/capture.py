"""Capture on and off (docs/design.md §2): activation, deactivation, collections the CMS
registers later, and sources declared beyond content.

Each flow is one transaction of repository statements (``repository.lifecycle.activation``,
``triggers`` and ``host_sources``): it either happens whole or not at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from media_usage_worker.domain.content_model import COLLECTION_SLUG_PATTERN
from media_usage_worker.domain.errors import ActivationError, InvalidSource
from media_usage_worker.domain.host_sources import ColumnKind, HostSource
from media_usage_worker.domain.reference_paths import ReferencePath
from media_usage_worker.domain.vocabulary import CaptureState
from media_usage_worker.repository.base.db import read_transaction, transaction
from media_usage_worker.repository.lifecycle import activation as capture
from media_usage_worker.repository.lifecycle import triggers
from media_usage_worker.repository.registry import host_sources
from media_usage_worker.repository.registry.content_tables import content_table_name

if TYPE_CHECKING:
    from sqlalchemy import Engine


def _capturable(slug: object) -> bool:
    # A host may register any slug; only one that is a safe identifier ever becomes SQL.
    return isinstance(slug, str) and COLLECTION_SLUG_PATTERN.fullmatch(slug) is not None


def activate(engine: Engine) -> list[str]:
    """Turn incremental capture on for every collection, in one transaction.

    Installs (or replaces) the capture triggers of each ``ec_<slug>`` table, marks each
    collection's capture ``active`` with ``reconciliation_required = 1`` so content written
    before now is picked up by reconciliation, and flips the global switch. On an already
    active database it re-verifies every collection: collections whose capture is active only
    get their triggers replaced; anything else is brought to active the same way.
    Returns the slugs it covered.
    """
    with transaction(engine) as conn:
        rows = capture.registered_collections(conn)
        for collection_id, slug in rows:
            if not _capturable(slug):
                raise ActivationError(
                    f"Collection slug {slug!r} (id {collection_id!r}) is not one this project "
                    f"can capture: it must match ^{COLLECTION_SLUG_PATTERN.pattern}$. Rename "
                    "or remove the collection, then activate again."
                )
            if not capture.table_exists(conn, content_table_name(slug)):
                raise ActivationError(f"Collection {slug!r} has no ec_{slug} table.")
            capture.capture_collection(conn, collection_id, slug)
        for source in host_sources.list_sources(conn):
            capture.capture_source(conn, source)
        triggers.install_revisions(conn)
        capture.switch_capture_on(conn)
    return [slug for _, slug in rows]


def capture_new_collections(engine: Engine) -> list[str]:
    """Capture every collection the CMS registered itself after activation (a registry row
    and its content table, no capture yet), as ``activate`` would; nothing before activation.
    Its slugs. A slug that is not a safe identifier, or a collection being deleted, is left
    alone (its coverage stays ``never``: unused does not answer over it)."""
    # Every reconcile tick asks: read first, and take a write transaction only to act.
    with read_transaction(engine) as conn:
        if not capture.is_activation_active(conn) or not capture.uncaptured_collections(conn):
            return []
    captured = []
    with transaction(engine) as conn:
        if not capture.is_activation_active(conn):
            return []
        for collection_id, slug in capture.uncaptured_collections(conn):
            if _capturable(slug) and capture.table_exists(conn, content_table_name(slug)):
                capture.capture_collection(conn, collection_id, slug)
                captured.append(slug)
    return captured


def deactivate(engine: Engine) -> list[str]:
    """Turn incremental capture off for every collection, in one transaction.

    The way back to a database ``db downgrade`` accepts. Every capture trigger is dropped, so
    host writes are no longer captured (nor refused); the queued work and reconciliation runs
    are deleted, since nothing would process them; every collection's coverage stops being
    trusted (``stale`` with ``reconciliation_required``; a never-indexed one stays ``never``)
    and loses its capture state; the global switch goes back to ``expanded``. The index rows
    stay: a later ``activate`` reconciles every collection again. Refused while a collection
    deletion is in progress. Returns the slugs whose triggers were dropped.
    """
    with transaction(engine) as conn:
        if capture.deletions_in_progress(conn):
            raise ActivationError("A collection deletion is in progress; deactivation refused.")
        slugs = [
            slug
            for _, slug in capture.registered_collections(conn)
            # A slug activation refused never got triggers, and never becomes SQL here.
            if _capturable(slug) and capture.table_exists(conn, content_table_name(slug))
        ]
        # Triggers first: dropping one waits for the table's writers in flight (PostgreSQL's
        # lock), so the work rows they queued exist by the time they are deleted below.
        for slug in slugs:
            triggers.remove(conn, slug)
        for source in host_sources.list_sources(conn):
            if capture.table_exists(conn, source.table):
                triggers.remove_source(conn, source)
        triggers.remove_revisions(conn)
        capture.drop_all_work(conn)
        capture.distrust_all_coverage(conn)
        capture.switch_capture_off(conn)
    return slugs


def declare_source(engine: Engine, source: HostSource, paths: Sequence[ReferencePath] = ()) -> None:
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
        capture.insert_reference_paths(conn, source.collection_id, paths)
        active = capture.is_activation_active(conn)
        capture.insert_status_row(conn, source, CaptureState.ACTIVE if active else None)
        if active:
            triggers.install_source(conn, source)
            capture.complete_if_nothing_to_index(conn, source)


def remove_declared_source(engine: Engine, table: str) -> HostSource:
    """Remove a declared source and everything of it, in one transaction: its triggers (the
    drop waits for the table's writers in flight), its work, coverage and index rows."""
    with transaction(engine) as conn:
        source = host_sources.require_declared(conn, table)
        if capture.table_exists(conn, source.table):
            triggers.remove_source(conn, source)
        host_sources.delete_index_of(conn, source.collection_id)
    return source
