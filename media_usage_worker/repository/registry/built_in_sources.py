"""The built-in sources kept registered over the columns their tables have now.

emdash keeps a user's avatar as ``users.avatar_url``; another host may keep ``avatar_id``, and a
CMS upgrade may add, drop or rename such a column after this project registered the source. The
reconcile tick re-reads the catalog and registers each built-in source again over what its
table has; on an active database the source is captured over its new columns and re-indexed.
What cannot be read at all stays a gap (``host_sources.built_in_gaps``) that coverage reports.
"""

from __future__ import annotations

import sqlalchemy as sa

from media_usage_worker.domain.errors import InvalidSource
from media_usage_worker.domain.host_sources import HostSource, built_in_for
from media_usage_worker.domain.vocabulary import ErrorCode
from media_usage_worker.repository.base import schema
from media_usage_worker.repository.base.db import Bind, read_transaction, transaction
from media_usage_worker.repository.lifecycle.activation import capture_source, is_activation_active
from media_usage_worker.repository.registry.collections import Collection, invalidate_coverage
from media_usage_worker.repository.registry.host_sources import (
    built_in_readings,
    check_against_catalog,
    registry_row,
)

_h = schema.host_sources.c


def register_built_in_sources(conn: sa.Connection) -> list[str]:
    """Register (or bring up to date) every built-in source whose table can be read, in the
    caller's transaction; the labels of those that changed."""
    active = is_activation_active(conn)
    changed = []
    for readable, stored in _changes(conn):
        row = registry_row(readable)
        if stored is None:
            conn.execute(schema.host_sources.insert().values(**row))
        else:
            conn.execute(
                schema.host_sources.update()
                .where(_h.collection_id == readable.collection_id)
                .values(columns=row["columns"])
            )
        if active:
            capture_source(conn, readable)
            if stored is not None:
                scope = Collection(readable.collection_id, readable.scope_key, readable.label)
                invalidate_coverage(conn, scope, ErrorCode.RULES_CHANGED)
        changed.append(readable.label)
    return changed


def sync_built_in_sources(bind: Bind) -> list[str]:
    """``register_built_in_sources`` for the reconcile tick: it reads first and takes a write
    transaction only when a table changed."""
    with read_transaction(bind) as conn:
        if not _changes(conn):
            return []
    with transaction(bind) as conn:
        return register_built_in_sources(conn)


def _changes(conn: sa.Connection) -> list[tuple[HostSource, HostSource | None]]:
    """Each built-in source whose table can be read and captured but that is not registered as
    it reads now: (as it reads now, as it is registered). One whose key is not a text key is
    left out (it cannot be captured): coverage keeps reporting its gap."""
    changes = []
    for shape, columns, registered in built_in_readings(conn):
        readable = built_in_for(shape, columns or ())
        if readable is None or readable == registered:
            continue
        try:
            check_against_catalog(conn, readable)
        except InvalidSource:
            continue
        changes.append((readable, registered))
    return changes
