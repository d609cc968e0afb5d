"""Manual repair (docs/design.md §9): rescan one collection synchronously.

The repair takes the collection's status row at its *current* epoch (without bumping it),
refreshes every entry, a page at a time through the same read-plan-write as a batch of work
(``refresh.refresh_entries``), and removes the sources of vanished ones. It deletes the work
that the rescan made redundant (``delete_work_through_epoch``) and finalises only if the epoch
is still the one it started at. A write that lands during the repair moves the epoch, so the
repair ends ``stale`` with ``CONTENT_USAGE_REPAIR_CONFLICT`` and that write's work stays
queued: never ``complete`` over missing work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from media_usage_worker.domain.errors import CollectionNotFound
from media_usage_worker.domain.policy import Limits
from media_usage_worker.domain.validation import RECONCILIATION_PAGE_LIMIT, split_usable
from media_usage_worker.domain.vocabulary import CoverageStatus, ErrorCode, RefreshCode
from media_usage_worker.pipeline.refresh import refresh_entries
from media_usage_worker.repository.base.ids import new_ulid
from media_usage_worker.repository.reconciling import repair as store
from media_usage_worker.repository.registry import collections
from media_usage_worker.repository.work_queue import work_rescan as rescan

if TYPE_CHECKING:
    from sqlalchemy import Engine

# Entries per page of a repair: the reconciliation's page.
PAGE = RECONCILIATION_PAGE_LIMIT


@dataclass(frozen=True)
class RepairResult:
    collection_slug: str
    status: CoverageStatus  # complete | partial | failed | stale
    indexed: int
    failed: int
    skipped: int
    removed: int
    error_code: str | None


@dataclass
class _Tally:
    indexed: int = 0
    failed: int = 0
    skipped: int = 0
    removed: int = 0
    first_error: str | None = None

    def count(self, code: RefreshCode | None) -> None:
        if code is None:
            self.indexed += 1
        elif code == RefreshCode.GENERATION_CONFLICT:
            self.skipped += 1
        else:
            self.failed += 1
            self.first_error = self.first_error or code

    def outcome(self) -> CoverageStatus:
        if not self.failed and not self.skipped:
            return CoverageStatus.COMPLETE
        return CoverageStatus.FAILED if not self.indexed else CoverageStatus.PARTIAL


def _rescan_entries(
    engine: Engine, collection_id: str, slug: str, limits: Limits, tally: _Tally, total: int,
    progress: Callable[[int, int], None] | None,
) -> list[str]:  # fmt: skip
    """Refresh every entry page by page; returns the ids that cannot be indexed."""
    unusable: list[str] = []
    done = 0
    after: str | None = None
    while ids := store.content_id_page(engine, slug, after, PAGE):
        usable, unusable_ids = split_usable(ids, lambda content_id: content_id)
        if unusable_ids:
            unusable += unusable_ids
            tally.failed += len(unusable_ids)
            tally.first_error = tally.first_error or ErrorCode.UNUSABLE_CONTENT_ID
        if usable:
            for code in refresh_entries(engine, collection_id, slug, usable, limits).values():
                tally.count(code)
        done += len(ids)
        after = ids[-1]
        if progress:
            progress(done, total)
    return unusable


def repair_collection(
    engine: Engine,
    slug: str,
    *,
    limits: Limits | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> RepairResult:
    collection = collections.find_collection(engine, slug)
    if collection is None:
        raise CollectionNotFound(f"No collection has slug {slug!r}.")
    run_token = new_ulid()
    epoch, total = store.begin_repair(engine, collection.id, slug, run_token)
    limits = limits or Limits()
    tally = _Tally()
    # Ids the host stored that cannot be indexed: kept as failed work.
    unusable = _rescan_entries(engine, collection.id, slug, limits, tally, total, progress)
    # Entries that vanished: their sources go (guarded: only while they stay gone).
    orphans = store.orphaned_content_ids(engine, collection.id, slug)
    for start in range(0, len(orphans), PAGE):
        page = orphans[start : start + PAGE]
        for code in refresh_entries(engine, collection.id, slug, page, limits).values():
            if code is None:
                tally.removed += 1
            else:
                tally.skipped += 1

    rescan.delete_work_through_epoch(engine, collection.id, epoch)
    for content_id in unusable:
        rescan.record_unusable_content(
            engine,
            collection_id=collection.id, collection_slug=slug, content_id=content_id,
            change_epoch=epoch,
        )  # fmt: skip
    outcome = tally.outcome()
    error = None
    if outcome != CoverageStatus.COMPLETE:
        error = tally.first_error or ErrorCode.REPAIR_CONFLICT
    status = store.finish_repair(
        engine, collection.id, slug, run_token, epoch, outcome=outcome,
        indexed=tally.indexed, failed=tally.failed, error=error,
    )  # fmt: skip
    if status == CoverageStatus.STALE:
        error = ErrorCode.REPAIR_CONFLICT
    return RepairResult(
        slug, status, tally.indexed, tally.failed, tally.skipped, tally.removed, error
    )
