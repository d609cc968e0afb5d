"""The clean-up's fence (docs/design.md §13): what a retirement or a purge batch takes before it
may decide that an item is used nowhere, and the checks it makes behind it.

The fence holds the coverage table against every writer (PostgreSQL: ``LOCK TABLE ... IN SHARE
MODE``; SQLite: the batch's write transaction keeps every other writer out). A capture trigger
updates its scope's coverage row in the writer's own transaction, so a write that committed
before the fence has queued its work row, and a write that comes later waits for the batch to
commit; the queued writes are read and extracted behind it (``uses_not_yet_indexed``). Every
lock a batch takes waits at most ``FENCE_WAIT_MS``: a PostgreSQL lock request that waits
queues every later writer behind it, so a batch that cannot have its locks at once gives up
(``FenceBusy``: its items are not known yet) instead of stalling the site.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from media_usage_worker.repository.base.schema import index_status, media, occurrences, quarantine
from media_usage_worker.repository.work_queue.pending import baseline_holds, queued_uses

# How long a batch waits for the writers in flight (and a host transaction holding a media
# row) before it gives up the batch.
FENCE_WAIT_MS = 1000

_LOCK_NOT_AVAILABLE = "55P03"


class FenceBusy(Exception):
    """The fence or a row lock could not be taken in time: the batch is not known yet."""


def _locking(conn: sa.Connection, statement: Any) -> Any:
    """Run ``statement`` (which takes locks), turning a lock wait past the limit into
    ``FenceBusy``."""
    try:
        return conn.execute(statement)
    except sa.exc.OperationalError as exc:
        if getattr(exc.orig, "sqlstate", None) == _LOCK_NOT_AVAILABLE:
            raise FenceBusy() from exc
        raise


def hold_fence(conn: sa.Connection) -> None:
    """Take the fence for the rest of ``conn``'s transaction. SHARE mode conflicts with every
    writer of the coverage table, so no capture trigger can update a coverage row, nor a new
    collection or source add one, until this transaction ends; readers and other fences go
    on. The lock limit stays set for the row locks the batch takes next."""
    if conn.dialect.name != "postgresql":
        return
    conn.exec_driver_sql(f"SET LOCAL lock_timeout = {FENCE_WAIT_MS}")
    _locking(conn, sa.text(f"LOCK TABLE {index_status.name} IN SHARE MODE"))


def lock_rows(conn: sa.Connection, table: sa.Table, ids: Sequence[str]) -> dict[str, Any]:
    """Lock the rows of ``ids`` in ``table`` (the library or the quarantine) for this
    transaction and read them as committed: id → row. A row another transaction holds is
    waited for (at most the lock limit, when the fence set one); a row it deleted meanwhile is
    not returned. SQLite's write transaction already excludes every other writer."""
    query = sa.select(table).where(table.c.id.in_(sorted(set(ids))))
    if conn.dialect.name == "postgresql":
        query = query.with_for_update()
    return {row.id: row for row in _locking(conn, query)}


def uses_not_yet_indexed(conn: sa.Connection) -> set[str] | None:
    """The media ids that writes waiting in the work table name (empty: none waits); ``None``
    (not known yet) unless every scope is indexed whole but for those writes and the queue can
    be read and extracted here (``repository.pending``). Behind the fence no write can commit
    meanwhile, so the index and this set together are every use."""
    if not baseline_holds(conn):
        return None
    return queued_uses(conn)


def used_ids(conn: sa.Connection, ids: Sequence[str]) -> set[str]:
    """The ids among ``ids`` that some occurrence names (by id, or by a URL resolved to it)."""
    if not ids:
        return set()
    u = occurrences.c
    query = sa.select(u.media_id).where(u.media_id.in_(sorted(set(ids)))).distinct()
    return set(conn.execute(query).scalars())


def refused_by_rule(conn: sa.Connection, keys: Mapping[str, str]) -> dict[str, str]:
    """The candidates (media id → storage key) the rule refuses behind the fence, with why:
    every one ``not_known_yet`` while the index cannot answer (``uses_not_yet_indexed``); else
    those a use names, indexed or waiting (``used``), and those whose file another item names
    (``shared_file``; a used candidate stays in its table, so it counts as another)."""
    if not keys:
        return {}
    waiting = uses_not_yet_indexed(conn)
    if waiting is None:
        return dict.fromkeys(keys, "not_known_yet")
    refused = dict.fromkeys(used_ids(conn, list(keys)) | (waiting & set(keys)), "used")
    rest = [media_id for media_id in keys if media_id not in refused]
    shared = keys_named_elsewhere(conn, [keys[i] for i in rest], rest)
    refused.update({i: "shared_file" for i in rest if keys[i] in shared})
    return refused


def keys_named_elsewhere(
    conn: sa.Connection, keys: Sequence[str], outside: Sequence[str]
) -> set[str]:
    """The storage keys among ``keys`` that a library or quarantined row whose id is not in
    ``outside`` also names: the file is another item's too."""
    if not keys:
        return set()
    wanted, others = sorted(set(keys)), sorted(set(outside))
    named: set[str] = set()
    for table in (media, quarantine):
        query = sa.select(table.c.storage_key).where(
            table.c.storage_key.in_(wanted), table.c.id.not_in(others)
        )
        named.update(conn.execute(query.distinct()).scalars())
    return named
