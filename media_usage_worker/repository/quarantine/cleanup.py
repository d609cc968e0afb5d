"""Clean-up statements (docs/design.md §13): list the library items no source uses, retire
them into the quarantine behind the fence (``repository.fence``), restore them, and find
references to no library item. Purge statements are ``repository.purge``'s and the audit
``repository.audit_log``'s (both names stay importable from here).

A retirement is one transaction per batch: the fence, the library rows locked, then the rule's
checks (coverage complete and nothing waiting, no occurrence by id or by URL, no other row
naming the storage key), then the move. A write that comes after the fence waits for the batch
to commit: it is a use that began after the retirement, and restores the item when the worker
indexes it (``restore_used``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import sqlalchemy as sa

from media_usage_worker.domain.cleanup import (
    RestoreRefusal,
    RestoreResult,
    RetireRefusal,
    RetireResult,
    UnusedFilter,
    UnusedItem,
)
from media_usage_worker.domain.host_sources import Scope
from media_usage_worker.domain.remembered import RememberedTotals
from media_usage_worker.repository.base.clock import db_now
from media_usage_worker.repository.base.db import Bind, read_transaction, transaction
from media_usage_worker.repository.base.schema import (
    audit,
    index_status,
    media,
    occurrences,
    purges,
    quarantine,
    sources,
)
from media_usage_worker.repository.index.usage import read_coverage
from media_usage_worker.repository.quarantine.audit_log import audit_page, write_audit
from media_usage_worker.repository.quarantine.fence import (
    FENCE_WAIT_MS,
    FenceBusy,
    hold_fence,
    lock_rows,
    refused_by_rule,
    uses_not_yet_indexed,
)
from media_usage_worker.repository.quarantine.purge import (
    delivered,
    delivery_failed,
    purge_batch,
    purgeable_ids,
    undelivered,
)
from media_usage_worker.repository.quarantine.row_mirror import (
    mirror_library_columns,
    shared_columns,
)

__all__ = [
    "FENCE_WAIT_MS",
    "CleanupCounts",
    "audit_page",
    "cleanup_counts",
    "dangling",
    "delivered",
    "delivery_failed",
    "purge_batch",
    "purgeable_ids",
    "restore_batch",
    "restore_used",
    "retire_batch",
    "undelivered",
    "unused_ids",
    "unused_items",
]

_m, _q, _s, _o = media.c, quarantine.c, sources.c, occurrences.c

log = logging.getLogger(__name__)


# Each occurrence with the source whose current generation it is.
_CURRENT_OCCURRENCES = occurrences.join(
    sources, sa.and_(_s.source_key == _o.source_key, _s.current_generation == _o.generation)
)


def _uses(media_id: Any, *, live_only: bool = False) -> sa.Exists:
    """An occurrence of ``media_id`` in any source (``live_only``: in a source of an entry
    not in the trash). Every occurrence counts, whatever its source's variant or scope: to
    keep a file any reference is enough. A superseded generation's occurrences are deleted in
    the transaction that promotes the next one, so without ``live_only`` no join to the
    sources is needed: one probe of the occurrences' media id index, which the planner can
    also walk beside the library's ids (a merge anti-join) for a whole listing."""
    if not live_only:
        return sa.exists(sa.select(1).where(_o.media_id == media_id))

    return sa.exists(
        sa.select(1)
        .select_from(_CURRENT_OCCURRENCES)
        .where(_o.media_id == media_id, _s.content_deleted_at.is_(None))
    )


def _selection(chosen: UnusedFilter) -> list[sa.ColumnElement[bool]]:
    """The library items an unused listing (or ``retire --all-unused``) takes."""
    where = (
        [_uses(_m.id), ~_uses(_m.id, live_only=True)] if chosen.trashed_only else [~_uses(_m.id)]
    )
    if chosen.older_than_days is not None:
        # Day granularity: the first ten characters of every timestamp format a host may
        # have written (emdash's legacy text, ISO 8601) are the date, and sort alike.
        cutoff = sa.func.substr(db_now(-86_400 * chosen.older_than_days), 1, 10)
        where.append(sa.func.substr(_m.created_at, 1, 10) < cutoff)
    if chosen.mime_prefix is not None:
        where.append(sa.func.substr(_m.mime_type, 1, len(chosen.mime_prefix)) == chosen.mime_prefix)
    return where


# The most ids the queued writes may name for a listing to leave them out with one statement.
MAX_WAITING_IDS = 5000


class UnusedRead(NamedTuple):
    """What ``unused_items`` reads (a tuple too, for callers that unpack it)."""

    coverage: str
    known: bool
    items: list[UnusedItem]
    # The whole selection's count and bytes, when asked for and known.
    totals: tuple[int, int] | None


_st = index_status.c
_index_state = sa.select(
    sa.func.coalesce(sa.func.sum(_st.change_epoch), 0).label("epochs"),
    sa.func.count().label("scopes"),
    sa.func.max(_st.updated_at).label("status_changed"),
).subquery()
_library_state = sa.select(
    sa.func.count().label("items"),
    sa.func.coalesce(sa.func.sum(_m.size), 0).label("bytes"),
    sa.func.max(_m.created_at).label("newest"),
    sa.func.max(_m.id).label("last_id"),
).subquery()
_clean_up_state = sa.select(sa.func.max(audit.c.id).label("last_action")).subquery()
# What a selection's totals depend on, in one round trip of small reads: every captured write
# moves an epoch and every coverage change a status time; an upload or a host's deletion moves
# the library's figures; every retire, restore or purge writes an audit row; the day moves an
# age filter's cutoff (docs/design.md §13, "Totals").
_SELECTION_STATE = sa.select(
    _index_state, _library_state, _clean_up_state, sa.func.substr(db_now(), 1, 10)
).select_from(_index_state.join(_library_state, sa.true()).join(_clean_up_state, sa.true()))


def unused_items(
    bind: Bind,
    chosen: UnusedFilter,
    after: str | None,
    limit: int,
    *,
    totals: bool,
    remembered: RememberedTotals | None = None,
) -> UnusedRead:
    """(coverage, whether the answer is known, a page of unused items after the id ``after``,
    and with ``totals`` their count and bytes over the whole selection). Known while coverage
    is ``complete``, or whole but for queued writes whose references can be read now
    (``fence.uses_not_yet_indexed``): what they name is left out. The page is an index walk
    that stops at ``limit``; the totals read the whole selection, so a listing asks for them
    once, and with ``remembered`` (while coverage is ``complete``) they are counted once per
    state of the index and the library."""
    with read_transaction(bind) as conn:
        coverage = read_coverage(conn)
        where = _selection(chosen)
        if not coverage.complete:
            waiting = uses_not_yet_indexed(conn)
            if waiting is None or len(waiting) > MAX_WAITING_IDS:
                return UnusedRead(coverage.status, False, [], None)
            if waiting:
                where.append(_m.id.not_in(sorted(waiting)))
        page = sa.select(_m.id, _m.filename, _m.mime_type, _m.size, _m.storage_key, _m.created_at)
        page = page.where(*where).order_by(_m.id).limit(limit)
        if after is not None:
            page = page.where(_m.id > after)
        items = [UnusedItem(*row) for row in conn.execute(page)]
        if not totals:
            return UnusedRead(coverage.status, True, items, None)
        state = None
        if remembered is not None and coverage.complete:
            # Read before the count: a change between the two files the count under the
            # older state, which no later reader reports again.
            state = (chosen, *conn.execute(_SELECTION_STATE).one())
            known = remembered.recall(state)
            if known is not None:
                return UnusedRead(coverage.status, True, items, known)
        count, size = conn.execute(
            sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(_m.size), 0)).where(*where)
        ).one()
        counted = (int(count), int(size))
        if state is not None and remembered is not None:
            remembered.remember(state, counted)
    return UnusedRead(coverage.status, True, items, counted)


def unused_ids(bind: Bind, chosen: UnusedFilter, after: str | None, limit: int) -> list[str]:
    """The ids of the next ``limit`` unused items after ``after`` (``retire --all-unused``)."""
    query = sa.select(_m.id).where(*_selection(chosen)).order_by(_m.id).limit(limit)
    if after is not None:
        query = query.where(_m.id > after)
    with read_transaction(bind) as conn:
        return list(conn.execute(query).scalars())


def retire_batch(
    engine: sa.Engine,
    ids: Sequence[str],
    actor: str,
    reason: str,
    before_move: Callable[[], None] | None = None,
    *,
    dry_run: bool = False,
) -> RetireResult:
    """Move the ids the rule allows from the library into the quarantine, in one transaction
    behind the fence; every other id gets its reason. ``dry_run`` applies every check and moves
    nothing. ``before_move`` runs between the checks and the move (tests widen the window a
    write would have to race)."""
    if not dry_run:
        mirror_library_columns(engine)
    try:
        return _retire_batch(engine, ids, actor, reason, before_move, dry_run)
    except FenceBusy:
        return RetireResult([], dict.fromkeys(ids, RetireRefusal.NOT_KNOWN_YET))


def _retire_batch(
    engine: sa.Engine,
    ids: Sequence[str],
    actor: str,
    reason: str,
    before_move: Callable[[], None] | None,
    dry_run: bool,
) -> RetireResult:
    refused: dict[str, RetireRefusal] = {}
    with transaction(engine) as conn:
        hold_fence(conn)
        # Locked before anything is read of them: a host edit in flight is waited for (and
        # kept), and a second retirement of the same ids finds them gone, not duplicated.
        in_library = lock_rows(conn, media, ids)
        retired = set(conn.execute(sa.select(_q.id).where(_q.id.in_(ids))).scalars())
        for media_id in ids:
            if media_id in retired:
                refused[media_id] = RetireRefusal.ALREADY_RETIRED
            elif media_id not in in_library:
                refused[media_id] = RetireRefusal.NOT_IN_LIBRARY
        keys = {i: in_library[i].storage_key for i in ids if i not in refused}
        ruled = refused_by_rule(conn, keys)
        refused.update({i: RetireRefusal(why) for i, why in ruled.items()})
        candidates = [i for i in ids if i not in refused]
        if candidates and not dry_run:
            if before_move is not None:
                before_move()
            _move(conn, media, quarantine, candidates, retired_by=actor, reason=reason)
            write_audit(conn, actor, "retire", candidates, reason)
    return RetireResult(candidates, {i: refused[i] for i in ids if i in refused})


def restore_batch(bind: Bind, ids: Sequence[str], actor: str) -> RestoreResult:
    """Put quarantined items back into the library exactly as they were. The quarantine rows
    are locked first, so a restore racing a purge either wins whole (the purge finds the row
    gone) or loses whole (the row is gone when the lock is granted)."""
    refused: dict[str, RestoreRefusal] = {}
    with transaction(bind) as conn:
        held = lock_rows(conn, quarantine, ids)
        present = set(conn.execute(sa.select(_m.id).where(_m.id.in_(ids))).scalars())
        purged = _purged(conn, [i for i in ids if i not in held and i not in present])
        for media_id in ids:
            if media_id in present:
                refused[media_id] = RestoreRefusal.IN_LIBRARY
            elif media_id in purged:
                refused[media_id] = RestoreRefusal.PURGED
            elif media_id not in held:
                refused[media_id] = RestoreRefusal.NOT_RETIRED
        chosen = [i for i in ids if i not in refused]
        if chosen:
            _move(conn, quarantine, media, chosen)
            write_audit(conn, actor, "restore", chosen, None)
    return RestoreResult(chosen, {i: refused[i] for i in ids if i in refused})


def _purged(conn: sa.Connection, ids: Sequence[str]) -> set[str]:
    """The ids among ``ids`` that a purge removed for good (its audit names them)."""
    a = audit.c
    return {
        media_id
        for media_id in ids
        if conn.execute(
            sa.select(1)
            .where(a.action == "purge", a.media_ids.contains(json.dumps(media_id), autoescape=True))
            .limit(1)
        ).first()
    }


def restore_used(conn: sa.Connection, media_ids: Sequence[str]) -> list[str]:
    """Restore the quarantined items among ``media_ids``, which a write indexed in this
    transaction now uses: a use that began after the retirement. Returns the restored ids."""
    if not media_ids:
        return []
    found = sorted(lock_rows(conn, quarantine, media_ids))
    if found:
        _move(conn, quarantine, media, found)
        write_audit(conn, "worker", "restore", found, "a write uses it again")
    return found


def restore_retired_in_use(conn: sa.Connection, media_ids: Sequence[str]) -> list[str]:
    """The step of a batch's transaction after its index rows: ``restore_used`` of the media
    ids its writes use, each restore logged (an operator sees a retirement undone)."""
    restored = restore_used(conn, media_ids)
    if restored:
        log.warning(
            "media usage restored %d retired item(s) a write uses again: %s",
            len(restored), ", ".join(restored[:20]),
            extra={"media_usage": {"event": "media_usage.restored", "media_ids": restored}},
        )  # fmt: skip
    return restored


def _move(
    conn: sa.Connection, source: sa.Table, target: sa.Table, ids: list[str], **extra: str
) -> None:
    """Copy the rows of ``ids`` from ``source`` to ``target`` (every column the library and
    the quarantine share, the host's own included, and the quarantine's own when it is the
    target), then delete them from ``source``."""
    names = shared_columns(conn)
    origin = sa.table(source.name, *(sa.column(n) for n in names))
    columns: list[sa.ColumnElement[Any]] = [origin.c[n] for n in names]
    if target is quarantine:
        columns += [db_now().label("retired_at")]
        columns += [sa.literal(value, sa.Text).label(key) for key, value in extra.items()]
        names = [*names, "retired_at", *extra]
    destination = sa.table(target.name, *(sa.column(n) for n in names))
    rows = sa.select(*columns).where(origin.c.id.in_(ids))
    conn.execute(destination.insert().from_select(names, rows))
    conn.execute(source.delete().where(source.c.id.in_(ids)))


# The ids the occurrences name that neither the library nor the quarantine has: each distinct id
# is probed once (the occurrences' media id index, read in order), not once per occurrence.
_NAMED = sa.select(_o.media_id).where(_o.media_id.isnot(None)).distinct().subquery("named")
_MISSING_IDS = sa.select(_NAMED.c.media_id).where(
    ~sa.exists(sa.select(1).where(_m.id == _NAMED.c.media_id)),
    ~sa.exists(sa.select(1).where(_q.id == _NAMED.c.media_id)),
)
# Missing ids bound as a list up to this many; beyond, the references are found by a join.
_MISSING_AS_LIST = 1000


def _dangling_statement(missing: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """Current local references whose id is ``missing``, by id and place."""
    return (
        sa.select(_o.media_id, _s.collection_slug, _s.content_id, _o.field_path)
        .select_from(_CURRENT_OCCURRENCES)
        .where(missing)
        .order_by(_o.media_id, _s.collection_slug, _s.content_id, _o.field_path)
    )


class DanglingReference(NamedTuple):
    """A current reference to a media id no library item has, and where it is."""

    media_id: str
    collection: str  # a collection's slug, or a source's scope key
    content_id: str
    field_path: str

    @property
    def kind(self) -> str:
        """``content``, or the kind of the source beyond content the reference is in."""
        return Scope.of(self.collection).label

    def shown(self) -> dict[str, str]:
        """As the CLI's ``--json`` and the HTTP API give it."""
        return {"media_id": self.media_id, "kind": self.kind, "collection": self.collection,
                "content_id": self.content_id, "field_path": self.field_path}  # fmt: skip


class DanglingRead(NamedTuple):
    references: list[DanglingReference]  # up to the limit asked for
    total: int  # how many there are


def dangling(bind: Bind, limit: int) -> DanglingRead:
    """Up to ``limit`` references to no library item, with where they are, and how many there
    are."""
    with read_transaction(bind) as conn:
        missing = _missing(conn)
        if missing is None:
            return DanglingRead([], 0)
        statement = _dangling_statement(missing)
        rows = [DanglingReference(*row) for row in conn.execute(statement.limit(limit))]
        return DanglingRead(rows, _count(conn, statement))


def _missing(conn: sa.Connection) -> sa.ColumnElement[bool] | None:
    """Which occurrences name a missing id: None when no id is missing (the usual case)."""
    missing_ids = list(conn.execute(_MISSING_IDS.limit(_MISSING_AS_LIST + 1)).scalars())
    if not missing_ids:
        return None
    if len(missing_ids) <= _MISSING_AS_LIST:
        return _o.media_id.in_(missing_ids)
    return _o.media_id.in_(_MISSING_IDS.scalar_subquery())


def _count(conn: sa.Connection, statement: sa.Select[Any]) -> int:
    counted = sa.select(sa.func.count()).select_from(statement.order_by(None).subquery())
    return int(conn.execute(counted).scalar_one())


@dataclass(frozen=True)
class CleanupCounts:
    retired: int
    dangling: int
    restored_by_use: int
    undelivered_files: int
    parked_files: int = 0


def cleanup_counts(bind: Bind) -> CleanupCounts:
    """What the metrics show of the clean-up: items in the quarantine, dangling references,
    restores a later use made, purged files not yet handed to the host."""
    with read_transaction(bind) as conn:
        missing = _missing(conn)
        return CleanupCounts(
            conn.execute(sa.select(sa.func.count()).select_from(quarantine)).scalar_one(),
            0 if missing is None else _count(conn, _dangling_statement(missing)),
            conn.execute(
                sa.select(sa.func.count()).where(
                    audit.c.actor == "worker", audit.c.action == "restore"
                )
            ).scalar_one(),
            conn.execute(sa.select(sa.func.count()).select_from(purges)).scalar_one(),
            conn.execute(sa.select(sa.func.count(purges.c.parked_at))).scalar_one(),
        )
