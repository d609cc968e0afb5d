"""The clean-up workflow (docs/operations.md, "Cleaning up unused media"): list what can go,
retire it a fenced batch at a time, restore it. Validation comes before any statement; the
statements and the fence are ``repository.cleanup``'s."""

from __future__ import annotations

import json
import re
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from media_usage_worker.domain import validation as check
from media_usage_worker.domain.cleanup import (
    FENCE_BATCH,
    RestoreResult,
    RetireResult,
    UnusedFilter,
    UnusedPage,
    batches,
    checked_actor,
    checked_ids,
    checked_reason,
)
from media_usage_worker.domain.cursor import decode_cursor, encode_cursor
from media_usage_worker.domain.remembered import RememberedTotals

# The purge has its own module; its names stay importable from here.
from media_usage_worker.pipeline.purge import (
    DELIVERY_BATCH,
    PurgeReport,
    PurgeTarget,
    Send,
    checked_purge_target,
    deliver,
    purge,
)
from media_usage_worker.repository.quarantine import cleanup as store

if TYPE_CHECKING:
    from sqlalchemy import Engine

# An unused listing's cursor carries the selection's totals (count.bytes) past the first page.
_ORDER = re.compile(r"\d{1,12}\.\d{1,18}")


# One per database a process reads (an engine each): a server answering first pages again
# and again counts each state of its database once.
_REMEMBERED: weakref.WeakKeyDictionary[Engine, RememberedTotals] = weakref.WeakKeyDictionary()
_REMEMBERED_LOCK = threading.Lock()


def remembered_totals(engine: Engine) -> RememberedTotals:
    """The totals this process remembers for ``engine``'s database."""
    with _REMEMBERED_LOCK:
        remembered = _REMEMBERED.get(engine)
        if remembered is None:
            remembered = _REMEMBERED[engine] = RememberedTotals()
        return remembered


def _scope(chosen: UnusedFilter) -> str:
    return json.dumps(["unused", chosen.older_than_days, chosen.mime_prefix, chosen.trashed_only])


def unused(
    engine: Engine, chosen: UnusedFilter, *, limit: int | None = None, cursor: str | None = None
) -> UnusedPage:
    """A page of the library items no source uses (by id), with the selection's totals; not
    known (an empty page, ``known`` False) while the index cannot answer: coverage is neither
    ``complete`` nor whole but for queued writes it can read (docs/design.md §5). The totals
    are read with the first page and carried by the cursor: each later page is an index walk."""
    chosen = chosen.validated()
    page_limit = check.operator_limit(limit)
    position = decode_cursor(cursor, _ORDER, scope=_scope(chosen))
    after = None if position is None else position.id
    carried = None if position is None else _totals(position.order_value)
    coverage, known, items, read = store.unused_items(
        engine,
        chosen,
        after,
        page_limit + 1,
        totals=carried is None,
        remembered=remembered_totals(engine),
    )
    totals = carried or read
    if not known or totals is None:
        return UnusedPage(False, coverage, [], None, None, None)
    more = len(items) > page_limit
    items = items[:page_limit]
    shown = f"{totals[0]}.{totals[1]}"
    next_cursor = encode_cursor(shown, items[-1].id, scope=_scope(chosen)) if more else None
    return UnusedPage(True, coverage, items, next_cursor, *totals)


def _totals(order_value: str) -> tuple[int, int]:
    count, size = order_value.split(".")
    return int(count), int(size)


def retire(
    engine: Engine, ids: object, *, actor: str, reason: str = "unused", dry_run: bool = False
) -> RetireResult:
    """Retire ``ids`` into the quarantine, each batch behind the fence; the refused with why.
    ``dry_run`` makes every check of the real run and moves nothing."""
    chosen = checked_ids(ids)
    why, who = checked_reason(reason), checked_actor(actor)
    retired: list[str] = []
    refused = {}
    for batch in batches(chosen):
        result = store.retire_batch(engine, batch, who, why, dry_run=dry_run)
        retired += result.retired
        refused.update(result.refused)
    return RetireResult(retired, refused)


def retire_all_unused(
    engine: Engine,
    chosen: UnusedFilter,
    *,
    actor: str,
    dry_run: bool = False,
    progress: Callable[[RetireResult], None] | None = None,
    before_move: Callable[[], None] | None = None,
) -> RetireResult:
    """Retire every item of the selection, a fenced batch at a time (``dry_run``: every check
    of the real run, nothing moved; while coverage is not complete every item is refused
    ``not_known_yet``, as the real run would). An item some write uses between the listing
    and its batch is refused as ``used``, never retired."""
    chosen = chosen.validated()
    who = checked_actor(actor)
    retired: list[str] = []
    refused = {}
    after: str | None = None
    while True:
        ids = store.unused_ids(engine, chosen, after, FENCE_BATCH)
        if not ids:
            break
        after = ids[-1]
        result = store.retire_batch(engine, ids, who, "unused", before_move, dry_run=dry_run)
        retired += result.retired
        refused.update(result.refused)
        if progress is not None:
            progress(result)
    return RetireResult(retired, refused)


def restore(engine: Engine, ids: object, *, actor: str) -> RestoreResult:
    """Put quarantined items back into the library exactly as they were."""
    chosen = checked_ids(ids)
    who = checked_actor(actor)
    restored: list[str] = []
    refused = {}
    for batch in batches(chosen):
        result = store.restore_batch(engine, batch, who)
        restored += result.restored
        refused.update(result.refused)
    return RestoreResult(restored, refused)


__all__ = [
    "DELIVERY_BATCH",
    "PurgeReport",
    "PurgeTarget",
    "Send",
    "checked_purge_target",
    "deliver",
    "purge",
    "restore",
    "retire",
    "retire_all_unused",
    "unused",
]
