"""The clean-up workflow (docs/operations.md, "Cleaning up unused media"): list what can go,
retire it a fenced batch at a time, restore it. Validation comes before any statement; the
statements and the fence are ``repository.cleanup``'s."""

from __future__ import annotations

import json
import re
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
    checked_ids,
)
from media_usage_worker.domain.cursor import decode_cursor, encode_cursor
from media_usage_worker.domain.errors import InvalidArgument
from media_usage_worker.repository import cleanup as store

if TYPE_CHECKING:
    from sqlalchemy import Engine

_ORDER = re.compile(r"id")
MAX_REASON = 500


def _scope(chosen: UnusedFilter) -> str:
    return json.dumps(["unused", chosen.older_than_days, chosen.mime_prefix, chosen.trashed_only])


def unused(
    engine: Engine, chosen: UnusedFilter, *, limit: int | None = None, cursor: str | None = None
) -> UnusedPage:
    """A page of the library items no source uses (by id), with the selection's totals; not
    known (an empty page, ``known`` False) while coverage is not ``complete``."""
    chosen = chosen.validated()
    page_limit = check.operator_limit(limit)
    position = decode_cursor(cursor, _ORDER, scope=_scope(chosen))
    after = None if position is None else position.id
    coverage, items, count, size = store.unused_items(engine, chosen, after, page_limit + 1)
    if count is None:
        return UnusedPage(False, coverage, [], None, None, None)
    more = len(items) > page_limit
    items = items[:page_limit]
    next_cursor = encode_cursor("id", items[-1].id, scope=_scope(chosen)) if more else None
    return UnusedPage(True, coverage, items, next_cursor, count, size)


def _reason(reason: object) -> str:
    if not isinstance(reason, str) or not 0 < len(reason) <= MAX_REASON:
        raise InvalidArgument(f"A reason is 1 to {MAX_REASON} characters.")
    return check.identifier(reason, "a reason is text without NUL")


def retire(engine: Engine, ids: object, *, actor: str, reason: str = "unused") -> RetireResult:
    """Retire ``ids`` into the quarantine, each batch behind the fence; the refused with why."""
    chosen = checked_ids(ids)
    why, who = _reason(reason), _reason(actor)
    retired: list[str] = []
    refused = {}
    for batch in batches(chosen):
        result = store.retire_batch(engine, batch, who, why)
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
    """Retire every item of the selection, a fenced batch at a time (with ``dry_run``, only
    list them: the ids a run would try now). An item some write uses between the listing and
    its batch is refused as ``used``, never retired."""
    chosen = chosen.validated()
    who = _reason(actor)
    retired: list[str] = []
    refused = {}
    after: str | None = None
    while True:
        ids = store.unused_ids(engine, chosen, after, FENCE_BATCH)
        if not ids:
            break
        after = ids[-1]
        if dry_run:
            retired += ids
            continue
        result = store.retire_batch(engine, ids, who, "unused", before_move)
        retired += result.retired
        refused.update(result.refused)
        if progress is not None:
            progress(result)
    return RetireResult(retired, refused)


def restore(engine: Engine, ids: object, *, actor: str) -> RestoreResult:
    """Put quarantined items back into the library exactly as they were."""
    chosen = checked_ids(ids)
    who = _reason(actor)
    restored: list[str] = []
    refused = {}
    for batch in batches(chosen):
        result = store.restore_batch(engine, batch, who)
        restored += result.restored
        refused.update(result.refused)
    return RestoreResult(restored, refused)
