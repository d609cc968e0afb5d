"""The clean-up workflow (docs/operations.md, "Cleaning up unused media"): list what can go,
retire it a fenced batch at a time, restore it. Validation comes before any statement; the
statements and the fence are ``repository.cleanup``'s."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
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
    file_under,
)
from media_usage_worker.domain.cursor import decode_cursor, encode_cursor
from media_usage_worker.domain.errors import InvalidArgument
from media_usage_worker.domain.vocabulary import CoverageStatus
from media_usage_worker.repository import cleanup as store

if TYPE_CHECKING:
    from sqlalchemy import Engine

# An unused listing's cursor carries the selection's totals (count.bytes) past the first page.
_ORDER = re.compile(r"\d{1,12}\.\d{1,18}")
MAX_REASON = 500


def _scope(chosen: UnusedFilter) -> str:
    return json.dumps(["unused", chosen.older_than_days, chosen.mime_prefix, chosen.trashed_only])


def unused(
    engine: Engine, chosen: UnusedFilter, *, limit: int | None = None, cursor: str | None = None
) -> UnusedPage:
    """A page of the library items no source uses (by id), with the selection's totals; not
    known (an empty page, ``known`` False) while coverage is not ``complete``. The totals are
    read with the first page and carried by the cursor: each later page is an index walk."""
    chosen = chosen.validated()
    page_limit = check.operator_limit(limit)
    position = decode_cursor(cursor, _ORDER, scope=_scope(chosen))
    after = None if position is None else position.id
    carried = None if position is None else _totals(position.order_value)
    coverage, items, read = store.unused_items(
        engine, chosen, after, page_limit + 1, totals=carried is None
    )
    totals = carried or read
    if coverage != CoverageStatus.COMPLETE or totals is None:
        return UnusedPage(False, coverage, [], None, None, None)
    more = len(items) > page_limit
    items = items[:page_limit]
    shown = f"{totals[0]}.{totals[1]}"
    next_cursor = encode_cursor(shown, items[-1].id, scope=_scope(chosen)) if more else None
    return UnusedPage(True, coverage, items, next_cursor, *totals)


def _totals(order_value: str) -> tuple[int, int]:
    count, size = order_value.split(".")
    return int(count), int(size)


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


@dataclass(frozen=True)
class PurgeTarget:
    """Where purged files go: the host's purge task (sent by name with the storage keys), or
    files deleted under a local directory."""

    task: str | None = None
    directory: Path | None = None


@dataclass(frozen=True)
class PurgeReport:
    purged: list[str] = field(default_factory=list)
    delivered: int = 0
    # Storage key (or batch) -> why its delivery failed; it stays queued and is tried again.
    undelivered: dict[str, str] = field(default_factory=dict)


Send = Callable[[str, list[str]], None]
# A Celery task name as a host names one: dotted words.
_TASK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,199}")


def checked_purge_target(task: str | None, directory: str | None) -> PurgeTarget:
    """Where purged files go, from the settings ``MEDIA_USAGE_PURGE_TASK`` (a host's task
    name) and ``MEDIA_USAGE_STORAGE_DIR`` (an existing absolute directory)."""
    if task is not None and not _TASK_NAME.fullmatch(task):
        raise InvalidArgument("MEDIA_USAGE_PURGE_TASK is not a task name (e.g. host.tasks.purge).")
    if directory is None:
        return PurgeTarget(task, None)
    path = Path(directory)
    if not path.is_absolute() or not path.is_dir():
        raise InvalidArgument("MEDIA_USAGE_STORAGE_DIR must be an existing absolute directory.")
    return PurgeTarget(task, path.resolve())


DELIVERY_BATCH = 100


def purge(
    engine: Engine,
    older_than_days: int,
    *,
    actor: str,
    target: PurgeTarget,
    send: Send | None = None,
    dry_run: bool = False,
) -> PurgeReport:
    """Remove for good the quarantined items retired more than ``older_than_days`` ago, and
    hand their files to ``target``; files a crash left undelivered go first."""
    chosen = UnusedFilter(older_than_days).validated()
    assert chosen.older_than_days is not None
    who = _reason(actor)
    if target.task is None and target.directory is None:
        raise InvalidArgument(
            "Nowhere to send purged files: set MEDIA_USAGE_PURGE_TASK (a host task) or "
            "MEDIA_USAGE_STORAGE_DIR (a local directory)."
        )
    if dry_run:
        return PurgeReport(store.purgeable_ids(engine, chosen.older_than_days, 10_000))
    first = deliver(engine, target, send)
    purged: list[str] = []
    while ids := store.purgeable_ids(engine, chosen.older_than_days, FENCE_BATCH):
        done = store.purge_batch(engine, ids, who, chosen.older_than_days)
        if not done:
            break
        purged += done
    then = deliver(engine, target, send)
    return PurgeReport(
        purged, first.delivered + then.delivered, {**first.undelivered, **then.undelivered}
    )


def deliver(engine: Engine, target: PurgeTarget, send: Send | None = None) -> PurgeReport:
    """Hand every undelivered purged file to ``target``; a failure leaves it queued."""
    delivered = 0
    failures: dict[str, str] = {}
    failed_ids: set[str] = set()
    while True:
        rows = [r for r in store.undelivered(engine, DELIVERY_BATCH) if r[0] not in failed_ids]
        if not rows:
            break
        done: list[str] = []
        if target.task is not None:
            assert send is not None, "a purge task needs a sender"
            try:
                send(target.task, [key for _, key in rows])
                done = [media_id for media_id, _ in rows]
            except Exception as exc:
                for media_id, key in rows:
                    failures[key] = f"{type(exc).__name__}: {exc}"[:300]
                    failed_ids.add(media_id)
                    store.delivery_failed(engine, media_id, failures[key])
        else:
            assert target.directory is not None
            for media_id, key in rows:
                why = _delete_file(target.directory, key)
                if why is None:
                    done.append(media_id)
                else:
                    failures[key] = why
                    failed_ids.add(media_id)
                    store.delivery_failed(engine, media_id, why)
        if done:
            store.delivered(engine, done)
            delivered += len(done)
    return PurgeReport([], delivered, failures)


def _delete_file(directory: Path, key: str) -> str | None:
    """Delete the file of ``key`` under ``directory``; why not, if it was not deleted."""
    path = file_under(directory, key)
    if path is None:
        return "the storage key names a file outside MEDIA_USAGE_STORAGE_DIR: not deleted"
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"[:300]
    return None
