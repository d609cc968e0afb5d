"""Clean-up statements (docs/design.md §13): list the library items no source uses, retire
them into the quarantine under a fence, restore them, find references to no library item,
and the audit of every operator action.

The fence: a retirement is one transaction per batch that first holds the coverage table
against every writer (PostgreSQL: ``LOCK TABLE ... IN SHARE MODE``; SQLite: its write
transaction keeps every other writer out). A capture trigger updates its scope's coverage
row in the writer's own transaction, so a write that committed before the fence has made
coverage not ``complete`` (and the batch refuses with ``not_known_yet``), and a write that
comes later waits for the batch to commit: it is a use that began after the retirement, and
restores the item when the worker indexes it (``restore_used``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.cleanup import (
    RestoreRefusal,
    RestoreResult,
    RetireRefusal,
    RetireResult,
    UnusedFilter,
    UnusedItem,
)
from media_usage_worker.domain.vocabulary import CoverageStatus
from media_usage_worker.repository.clock import db_now
from media_usage_worker.repository.db import Bind, read_transaction, transaction
from media_usage_worker.repository.ids import new_ulid
from media_usage_worker.repository.schema import (
    audit,
    index_status,
    media,
    occurrences,
    purges,
    quarantine,
    sources,
    work,
)
from media_usage_worker.repository.usage import read_coverage

m, q, s, u = media.c, quarantine.c, sources.c, occurrences.c
_MEDIA_COLUMNS = [column.name for column in media.columns]


# Each occurrence with the source whose current generation it is.
_CURRENT_OCCURRENCES = occurrences.join(
    sources, sa.and_(s.source_key == u.source_key, s.current_generation == u.generation)
)


def _uses(media_id: Any, *, live_only: bool = False) -> sa.Exists:
    """An occurrence of ``media_id`` in any source (``live_only``: in a source of an entry
    not in the trash). Every occurrence counts, whatever its source's variant or scope: to
    keep a file any reference is enough. A superseded generation's occurrences are deleted in
    the transaction that promotes the next one, so without ``live_only`` no join to the
    sources is needed: one probe of the occurrences' media id index, which the planner can
    also walk beside the library's ids (a merge anti-join) for a whole listing."""
    if not live_only:
        return sa.exists(sa.select(1).where(u.media_id == media_id))

    return sa.exists(
        sa.select(1)
        .select_from(_CURRENT_OCCURRENCES)
        .where(u.media_id == media_id, s.content_deleted_at.is_(None))
    )


def _selection(chosen: UnusedFilter) -> list[sa.ColumnElement[bool]]:
    """The library items an unused listing (or ``retire --all-unused``) takes."""
    where = [_uses(m.id), ~_uses(m.id, live_only=True)] if chosen.trashed_only else [~_uses(m.id)]
    if chosen.older_than_days is not None:
        # Day granularity: the first ten characters of every timestamp format a host may
        # have written (emdash's legacy text, ISO 8601) are the date, and sort alike.
        cutoff = sa.func.substr(db_now(-86_400 * chosen.older_than_days), 1, 10)
        where.append(sa.func.substr(m.created_at, 1, 10) < cutoff)
    if chosen.mime_prefix is not None:
        where.append(sa.func.substr(m.mime_type, 1, len(chosen.mime_prefix)) == chosen.mime_prefix)
    return where


def unused_items(
    bind: Bind, chosen: UnusedFilter, after: str | None, limit: int, *, totals: bool
) -> tuple[str, list[UnusedItem], tuple[int, int] | None]:
    """(coverage, a page of unused items after the id ``after``, and with ``totals`` their
    count and bytes over the whole selection); no items nor totals unless coverage is
    ``complete``. The page is an index walk that stops at ``limit``; the totals read the
    whole selection, so a listing asks for them once."""
    with read_transaction(bind) as conn:
        coverage = read_coverage(conn)
        if not coverage.complete:
            return coverage.status, [], None
        where = _selection(chosen)
        page = sa.select(m.id, m.filename, m.mime_type, m.size, m.storage_key, m.created_at)
        page = page.where(*where).order_by(m.id).limit(limit)
        if after is not None:
            page = page.where(m.id > after)
        items = [UnusedItem(*row) for row in conn.execute(page)]
        if not totals:
            return coverage.status, items, None
        count, size = conn.execute(
            sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(m.size), 0)).where(*where)
        ).one()
    return coverage.status, items, (int(count), int(size))


def unused_ids(bind: Bind, chosen: UnusedFilter, after: str | None, limit: int) -> list[str]:
    """The ids of the next ``limit`` unused items after ``after`` (``retire --all-unused``)."""
    query = sa.select(m.id).where(*_selection(chosen)).order_by(m.id).limit(limit)
    if after is not None:
        query = query.where(m.id > after)
    with read_transaction(bind) as conn:
        return list(conn.execute(query).scalars())


# How long a retirement waits for the writers in flight before it gives up the batch: while
# it waits, PostgreSQL queues every later writer behind its lock request, so a long host
# transaction must not turn into a stall of every write.
FENCE_WAIT_MS = 1000


class _FenceBusy(Exception):
    """The fence could not be taken in time: the batch is not known yet."""


def _hold_every_coverage_row(conn: sa.Connection) -> None:
    """The fence (module docstring). SHARE mode conflicts with every writer of the table, so
    no capture trigger can update a coverage row, nor a new collection or source add one,
    until this transaction ends; other readers and other fences go on."""
    if conn.dialect.name != "postgresql":
        return
    conn.exec_driver_sql(f"SET LOCAL lock_timeout = {FENCE_WAIT_MS}")
    try:
        conn.exec_driver_sql(f"LOCK TABLE {index_status.name} IN SHARE MODE")
    except sa.exc.OperationalError as exc:
        if getattr(exc.orig, "sqlstate", None) == "55P03":  # lock_not_available
            raise _FenceBusy() from exc
        raise
    conn.exec_driver_sql("SET LOCAL lock_timeout = 0")


def retire_batch(
    engine: sa.Engine,
    ids: Sequence[str],
    actor: str,
    reason: str,
    before_move: Callable[[], None] | None = None,
) -> RetireResult:
    """Move the ids no source uses from the library into the quarantine, in one transaction
    behind the fence; every other id gets its reason. ``before_move`` runs between the checks
    and the move (tests widen the window a write would have to race)."""
    try:
        return _retire_batch(engine, ids, actor, reason, before_move)
    except _FenceBusy:
        return RetireResult([], dict.fromkeys(ids, RetireRefusal.NOT_KNOWN_YET))


def _retire_batch(
    engine: sa.Engine,
    ids: Sequence[str],
    actor: str,
    reason: str,
    before_move: Callable[[], None] | None,
) -> RetireResult:
    refused: dict[str, RetireRefusal] = {}
    with transaction(engine) as conn:
        _hold_every_coverage_row(conn)
        in_library = set(conn.execute(sa.select(m.id).where(m.id.in_(ids))).scalars())
        retired = set(conn.execute(sa.select(q.id).where(q.id.in_(ids))).scalars())
        for media_id in ids:
            if media_id in retired:
                refused[media_id] = RetireRefusal.ALREADY_RETIRED
            elif media_id not in in_library:
                refused[media_id] = RetireRefusal.NOT_IN_LIBRARY
        candidates = [i for i in ids if i not in refused]
        if candidates and not _settled(conn):
            refused.update(dict.fromkeys(candidates, RetireRefusal.NOT_KNOWN_YET))
            candidates = []
        if candidates:
            used = set(
                conn.execute(sa.select(m.id).where(m.id.in_(candidates), _uses(m.id))).scalars()
            )
            refused.update(dict.fromkeys(used, RetireRefusal.USED))
            candidates = [i for i in candidates if i not in used]
        if candidates:
            if before_move is not None:
                before_move()
            _move(conn, media, quarantine, candidates, retired_by=actor, reason=reason)
            _audit(conn, actor, "retire", candidates, reason)
    return RetireResult(candidates, {i: refused[i] for i in ids if i in refused})


def _settled(conn: sa.Connection) -> bool:
    """Coverage is ``complete`` everywhere and no captured write waits to be indexed."""
    if read_coverage(conn).status != CoverageStatus.COMPLETE:
        return False
    waiting = sa.select(1).select_from(work).where(work.c.state != "failed").limit(1)
    return conn.execute(waiting).first() is None


def restore_batch(engine: sa.Engine, ids: Sequence[str], actor: str) -> RestoreResult:
    """Put quarantined items back into the library exactly as they were."""
    refused: dict[str, RestoreRefusal] = {}
    with transaction(engine) as conn:
        held = set(conn.execute(sa.select(q.id).where(q.id.in_(ids))).scalars())
        present = set(conn.execute(sa.select(m.id).where(m.id.in_(ids))).scalars())
        for media_id in ids:
            if media_id in present:
                refused[media_id] = RestoreRefusal.IN_LIBRARY
            elif media_id not in held:
                refused[media_id] = RestoreRefusal.NOT_RETIRED
        chosen = [i for i in ids if i not in refused]
        if chosen:
            _move(conn, quarantine, media, chosen)
            _audit(conn, actor, "restore", chosen, None)
    return RestoreResult(chosen, {i: refused[i] for i in ids if i in refused})


def restore_used(conn: sa.Connection, media_ids: Sequence[str]) -> list[str]:
    """Restore the quarantined items among ``media_ids``, which a write indexed in this
    transaction now uses: a use that began after the retirement. Returns the restored ids."""
    if not media_ids:
        return []
    found = sorted(conn.execute(sa.select(q.id).where(q.id.in_(sorted(set(media_ids))))).scalars())
    if found:
        _move(conn, quarantine, media, found)
        _audit(conn, "worker", "restore", found, "a write uses it again")
    return found


def _move(
    conn: sa.Connection, source: sa.Table, target: sa.Table, ids: list[str], **extra: str
) -> None:
    """Copy the rows of ``ids`` from ``source`` to ``target`` (the media columns, and the
    quarantine's own when it is the target), then delete them from ``source``."""
    columns: list[sa.ColumnElement[Any]] = [source.c[name] for name in _MEDIA_COLUMNS]
    names = list(_MEDIA_COLUMNS)
    if target is quarantine:
        columns += [db_now().label("retired_at")]
        columns += [sa.literal(value, sa.Text).label(key) for key, value in extra.items()]
        names += ["retired_at", *extra]
    rows = sa.select(*columns).where(source.c.id.in_(ids))
    conn.execute(target.insert().from_select(names, rows))
    conn.execute(source.delete().where(source.c.id.in_(ids)))


def _audit(
    conn: sa.Connection, actor: str, action: str, ids: list[str], detail: str | None
) -> None:
    conn.execute(
        audit.insert().values(
            id=new_ulid(), at=db_now(), actor=actor, action=action,
            media_ids=json.dumps(ids), detail=detail,
        )
    )  # fmt: skip


def audit_page(bind: Bind, limit: int) -> list[dict[str, Any]]:
    """The latest operator actions, newest first."""
    a = audit.c
    query = sa.select(audit).order_by(a.at.desc(), a.id.desc()).limit(limit)
    with read_transaction(bind) as conn:
        return [
            {**row._mapping, "media_ids": json.loads(row.media_ids)} for row in conn.execute(query)
        ]


@functools.cache
def _dangling_statement() -> sa.Select[Any]:
    # Current local references to an id in neither the library nor the quarantine.

    return (
        sa.select(u.media_id, s.collection_slug, s.content_id, u.field_path)
        .select_from(_CURRENT_OCCURRENCES)
        .where(
            u.media_id.isnot(None),
            ~sa.exists(sa.select(1).where(m.id == u.media_id)),
            ~sa.exists(sa.select(1).where(q.id == u.media_id)),
        )
        .order_by(u.media_id, s.collection_slug, s.content_id, u.field_path)
    )


def dangling(bind: Bind, limit: int) -> tuple[list[tuple[str, str, str, str]], int]:
    """(up to ``limit`` references to no library item, with where they are; how many there are)."""
    statement = _dangling_statement()
    with read_transaction(bind) as conn:
        rows = [tuple(row) for row in conn.execute(statement.limit(limit))]
        total = conn.execute(
            sa.select(sa.func.count()).select_from(statement.order_by(None).subquery())
        ).scalar_one()
    return rows, int(total)


def purgeable_ids(bind: Bind, older_than_days: int, limit: int) -> list[str]:
    """Quarantined items retired more than ``older_than_days`` days ago (by the database's
    clock), oldest first."""
    query = (
        sa.select(q.id)
        .where(q.retired_at < db_now(-86_400 * older_than_days))
        .order_by(q.retired_at, q.id)
        .limit(limit)
    )
    with read_transaction(bind) as conn:
        return list(conn.execute(query).scalars())


def purge_batch(
    engine: sa.Engine, ids: Sequence[str], actor: str, older_than_days: int
) -> list[str]:
    """Delete the items from the quarantine for good, each file's storage key left in the
    delivery table in the same transaction; returns the ids purged (still old enough, still
    quarantined: a restore since the listing keeps its item)."""
    with transaction(engine) as conn:
        due = sa.and_(q.id.in_(ids), q.retired_at < db_now(-86_400 * older_than_days))
        conn.execute(
            purges.insert().from_select(
                ["media_id", "storage_key", "purged_at"],
                sa.select(q.id, q.storage_key, db_now()).where(due),
            )
        )
        gone = sorted(conn.execute(quarantine.delete().where(due).returning(q.id)).scalars())
        if gone:
            _audit(conn, actor, "purge", gone, None)
    return gone


def undelivered(bind: Bind, limit: int) -> list[tuple[str, str]]:
    """(media id, storage key) of purged files not yet handed to the host, oldest first."""
    p = purges.c
    query = sa.select(p.media_id, p.storage_key).order_by(p.purged_at, p.media_id).limit(limit)
    with read_transaction(bind) as conn:
        return [(i, k) for i, k in conn.execute(query)]


def delivered(bind: Bind, media_ids: Sequence[str]) -> None:
    with transaction(bind) as conn:
        conn.execute(purges.delete().where(purges.c.media_id.in_(media_ids)))


def delivery_failed(bind: Bind, media_id: str, error: str) -> None:
    p = purges.c
    with transaction(bind) as conn:
        conn.execute(
            purges.update()
            .where(p.media_id == media_id)
            .values(attempt_count=p.attempt_count + 1, last_error=error[:500])
        )


@dataclass(frozen=True)
class CleanupCounts:
    retired: int
    dangling: int
    restored_by_use: int
    undelivered_files: int


def cleanup_counts(bind: Bind) -> CleanupCounts:
    """What the metrics show of the clean-up: items in the quarantine, dangling references,
    restores a later use made, purged files not yet handed to the host."""
    dangling_refs = _dangling_statement().order_by(None).subquery()
    with read_transaction(bind) as conn:
        return CleanupCounts(
            conn.execute(sa.select(sa.func.count()).select_from(quarantine)).scalar_one(),
            conn.execute(sa.select(sa.func.count()).select_from(dangling_refs)).scalar_one(),
            conn.execute(
                sa.select(sa.func.count()).where(
                    audit.c.actor == "worker", audit.c.action == "restore"
                )
            ).scalar_one(),
            conn.execute(sa.select(sa.func.count()).select_from(purges)).scalar_one(),
        )
