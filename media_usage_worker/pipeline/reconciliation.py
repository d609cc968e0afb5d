"""Reconciliation steps (docs/design.md §6): bring a collection's coverage back to ``complete``.

One coordinator row per collection that needs it. Each step runs under the coordinator's lease
and does a bounded amount of work: the scan phase enqueues the collection's content ids (50 a
page, up to the id that was largest when the scan began) as work at the run's epoch; once that
work has drained, the sources phase enqueues entries whose content is gone; when that work has
drained too, coverage is finalised: ``complete``, or ``stale`` while writes made during the run
still wait. A write during the run is work of its own at a later epoch: it neither restarts the
run nor invalidates the run's claims, so a run ends while the site keeps writing.

The statements are ``repository.reconciliation``; this module decides which to run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from media_usage_worker.domain import policy
from media_usage_worker.domain.host_sources import Scope
from media_usage_worker.domain.snapshots import run_fingerprint
from media_usage_worker.domain.validation import RECONCILIATION_PAGE_LIMIT, split_usable
from media_usage_worker.domain.vocabulary import (
    ErrorCode,
    WorkState,
)
from media_usage_worker.domain.vocabulary import ReconciliationAction as Action
from media_usage_worker.domain.vocabulary import ReconciliationPhase as Phase
from media_usage_worker.pipeline.capture import capture_new_collections
from media_usage_worker.repository.base import statistics
from media_usage_worker.repository.reconciling import ranges
from media_usage_worker.repository.reconciling import reconciliation as store
from media_usage_worker.repository.reconciling.reconciliation import Coordinator
from media_usage_worker.repository.registry.built_in_sources import sync_built_in_sources
from media_usage_worker.repository.registry.field_registry import load_fields
from media_usage_worker.repository.registry.rules import mark_fields_changed, mark_rules_changed
from media_usage_worker.repository.work_queue import work_rescan as rescan

if TYPE_CHECKING:
    from sqlalchemy import Engine

log = logging.getLogger(__name__)
# Ids per enqueue statement (the work repository's limit).
PAGE = RECONCILIATION_PAGE_LIMIT
# Ids (or source keys) one step reads: twenty pages under one lease, so a backfill is not
# paced by a round of lease, read and release for every fifty entries.
STEP = 1000
# Work a scan keeps queued ahead of the workers. It stops there; the batch that drains the
# collection's work below ``repository.reconciliation.WAKE_BELOW`` wakes it for more (docs/design.md
# §6), so the workers are fed as fast as they drain, and incremental writes never wait
# behind more than a few seconds of backfill.
SCAN_AHEAD = 5000
# Source keys one step of the sources phase passes. The database compares them with the
# content table and hands back only the entries that are gone, so a step costs two reads
# of the range, not a round trip per thousand keys (a million entries: 50 steps).
SOURCES_STEP = 20_000
# Content ids per key range (the workers' batch size by default), and the ranges a scan keeps
# handed out ahead of the workers: enough to keep every worker process busy between wakes
# (a range that completes while fewer than ``repository.reconciliation.RANGES_WAKE_BELOW``
# are left wakes the scan), few enough that an incremental write never waits behind more
# than a few seconds of backfill.
RANGE_SIZE = 300
RANGES_AHEAD = 12
CANDIDATES_PER_ROUND = 4
# A finalize that found the status row held by a host's transaction tries again this soon.
FINALIZE_RETRY_SECONDS = 1


@dataclass(frozen=True)
class StepReport:
    collection_slug: str
    phase: Phase
    action: Action
    enqueued: int = 0


class Reconciler:
    """``tick`` is one bounded round of reconciliation work across due collections."""

    def __init__(
        self,
        engine: Engine,
        *,
        defer_seconds: int = 5,
        on_enqueued: Callable[[], object] | None = None,
        range_size: int = RANGE_SIZE,
    ) -> None:
        self.engine = engine
        self.defer_seconds = defer_seconds
        self.range_size = range_size
        # Called after each step that enqueued work: the caller sends it at once, so the
        # workers start on the first pages while the next are still being enqueued.
        self.on_enqueued = on_enqueued
        # Whether the last ``tick`` stopped at its limits while a step was still due.
        self.more_due = False

    def tick(self, max_steps: int = 100, budget_seconds: float = 5.0) -> list[StepReport]:
        """Up to ``max_steps`` pages (or ``budget_seconds``) of work across due collections."""
        deadline = time.monotonic() + budget_seconds
        if not store.drop_finished(self.engine):
            return []
        # Indexed under other extraction rules, or with fields the CMS changed itself since:
        # no longer complete, reconciled like the rest. A collection the CMS created itself
        # is captured first, and a built-in source is registered over the columns its table
        # has now.
        captured = capture_new_collections(self.engine) + sync_built_in_sources(self.engine)
        changed = mark_rules_changed(self.engine) + mark_fields_changed(self.engine)
        reports = [StepReport(slug, Phase.SCAN, Action.RULES_CHANGED) for slug in changed]
        reports += [StepReport(slug, Phase.SCAN, Action.CAPTURED) for slug in captured]
        store.reopen_failed_after_new_writes(self.engine)
        store.seed(self.engine)
        while len(reports) < max_steps and time.monotonic() < deadline:
            candidates = store.due_collection_ids(self.engine, CANDIDATES_PER_ROUND)
            if not candidates:
                break
            for collection_id in candidates:
                coordinator = store.claim(self.engine, collection_id)
                if coordinator is None:
                    continue
                try:
                    reports.append(self._step(coordinator))
                    if reports[-1].action == Action.ENQUEUED and self.on_enqueued is not None:
                        self.on_enqueued()
                except Exception:
                    log.exception("reconciliation step for %s failed", coordinator.collection_slug)
                    self._fail(coordinator, ErrorCode.RECONCILIATION_FAILED)
                    reports.append(
                        StepReport(
                            coordinator.collection_slug,
                            coordinator.phase,
                            Action.FAILED,
                        )
                    )
        # Out of steps or time with a step still due (the sources phase of a large collection,
        # say): the caller hands the rest on at once instead of leaving it to the next tick.
        cut_short = len(reports) >= max_steps or time.monotonic() >= deadline
        self.more_due = cut_short and bool(store.due_collection_ids(self.engine, 1))
        if any(r.action == Action.COMPLETED for r in reports):
            statistics.refresh(self.engine)  # a backfill just ended: the tables grew
        else:
            statistics.refresh_if_grown(self.engine)
        return reports

    def _step(self, c: Coordinator) -> StepReport:
        if c.target_epoch is None:
            return self._start(c, restarted=False)
        if not store.run_still_owned(self.engine, c):
            return self._start(c, restarted=True)
        fields = load_fields(self.engine, c.collection_id)
        if run_fingerprint(fields) != c.field_fingerprint:
            return self._start(c, restarted=True)
        if c.phase == Phase.SCAN:
            return self._scan(c)
        return self._sources(c)

    def _start(self, c: Coordinator, *, restarted: bool) -> StepReport:
        """Begin (or restart) a run: bump the epoch, take the status row, fix the scan range."""
        run = store.start_run(self.engine, c)
        if run is None:
            store.release(self.engine, c, self.defer_seconds)
            return StepReport(c.collection_slug, c.phase, Action.DEFERRED)
        store.release(
            self.engine, c, 0, target_epoch=run.epoch,
            field_fingerprint=run_fingerprint(run.fields), phase=Phase.SCAN,
            scan_cursor=None, scan_upper_id=run.scan_upper_id, source_cursor=None,
            source_upper_key=None,
        )  # fmt: skip
        return StepReport(
            c.collection_slug,
            Phase.SCAN,
            Action.RESTARTED if restarted else Action.STARTED,
        )

    def _enqueue(self, c: Coordinator, phase: Phase, ids: list[str]) -> None:
        assert c.lease_token is not None and c.target_epoch is not None
        rescan.enqueue_reconciliation_page(
            self.engine,
            collection_id=c.collection_id, collection_slug=c.collection_slug,
            run_token=c.run_token, lease_token=c.lease_token, change_epoch=c.target_epoch,
            phase=phase, content_ids=ids,
        )  # fmt: skip

    def _scan(self, c: Coordinator) -> StepReport:
        if Scope.of(c.collection_slug).is_content:
            return self._scan_ranges(c)
        # A source beyond content has no version to fence an unleased write with: its
        # entries are queued one work row each.
        if store.work_backlog(self.engine, c.collection_id, SCAN_AHEAD) >= SCAN_AHEAD:
            # Enough queued: the drain wakes this run (or the next tick finds it due).
            store.release_to_wait(self.engine, c, self.defer_seconds, for_all=False)
            return StepReport(c.collection_slug, Phase.SCAN, Action.AHEAD)
        ids = store.scan_page(self.engine, c, STEP)
        if ids:
            usable, unusable = split_usable(ids, lambda content_id: content_id)
            for start in range(0, len(usable), PAGE):
                self._enqueue(c, Phase.SCAN, usable[start : start + PAGE])
            assert c.target_epoch is not None
            for content_id in unusable:
                rescan.record_unusable_content(
                    self.engine,
                    collection_id=c.collection_id, collection_slug=c.collection_slug,
                    content_id=content_id, change_epoch=c.target_epoch,
                )  # fmt: skip
            store.release(self.engine, c, 0, scan_cursor=ids[-1])
            return StepReport(c.collection_slug, Phase.SCAN, Action.ENQUEUED, len(ids))
        return self._scan_done(c)

    def _scan_done(self, c: Coordinator) -> StepReport:
        """Every id of the scan is out: once its work has drained, the sources phase."""
        barrier = self._work_barrier(c)
        if barrier is not None:
            return barrier
        store.release(
            self.engine, c, 0, phase=Phase.SOURCES, source_cursor=None,
            source_upper_key=store.source_upper_key(self.engine, c),
        )  # fmt: skip
        return StepReport(c.collection_slug, Phase.SOURCES, Action.SOURCES)

    def _scan_ranges(self, c: Coordinator) -> StepReport:
        """Hand out the next key ranges while fewer than ``RANGES_AHEAD`` wait; the scan's
        unusable ids are recorded as failed work, as entries no range can index."""
        left = ranges.ranges_left(self.engine, c.collection_id, RANGES_AHEAD)
        if left >= RANGES_AHEAD:
            store.release_to_wait(self.engine, c, self.defer_seconds, for_all=False)
            return StepReport(c.collection_slug, Phase.SCAN, Action.AHEAD)
        ids = store.scan_page(self.engine, c, (RANGES_AHEAD - left) * self.range_size)
        if not ids:
            return self._scan_done(c)
        assert c.target_epoch is not None
        for content_id in split_usable(ids, lambda content_id: content_id)[1]:
            rescan.record_unusable_content(
                self.engine,
                collection_id=c.collection_id, collection_slug=c.collection_slug,
                content_id=content_id, change_epoch=c.target_epoch,
            )  # fmt: skip
        lasts = [
            ids[min(i + self.range_size, len(ids)) - 1] for i in range(0, len(ids), self.range_size)
        ]
        bounds = list(zip([c.scan_cursor, *lasts[:-1]], lasts, strict=True))
        if not store.hand_out_ranges(self.engine, c, bounds):
            # The run lost the status row (or this step its lease): the next step finds out
            # which, at once, instead of after the lease.
            store.release(self.engine, c, 0)
            return StepReport(c.collection_slug, Phase.SCAN, Action.DEFERRED)
        store.release(self.engine, c, 0)
        return StepReport(c.collection_slug, Phase.SCAN, Action.ENQUEUED, len(ids))

    def _sources(self, c: Coordinator) -> StepReport:
        last_key, gone = store.gone_in_source_range(self.engine, c, SOURCES_STEP)
        if last_key is not None:
            for start in range(0, len(gone), PAGE):
                self._enqueue(c, Phase.SOURCES, gone[start : start + PAGE])
            store.release(self.engine, c, 0, source_cursor=last_key)
            return StepReport(
                c.collection_slug,
                Phase.SOURCES,
                Action.ENQUEUED,
                len(gone),
            )
        barrier = self._work_barrier(c)
        if barrier is not None:
            return barrier
        store.drop_foreign_rows(self.engine, c)
        if store.finalize(self.engine, c) is not None:
            return StepReport(c.collection_slug, Phase.SOURCES, Action.COMPLETED)
        if store.run_still_owned(self.engine, c):
            # A host transaction held the status row: try again in a moment, run kept.
            store.release(self.engine, c, FINALIZE_RETRY_SECONDS)
            return StepReport(c.collection_slug, Phase.SOURCES, Action.WAITING)
        return self._start(c, restarted=True)

    def _work_barrier(self, c: Coordinator) -> StepReport | None:
        """Wait for the run's work to drain; then a failed item fails the run.

        The run waits for the other items first, so its coverage says how much was indexed
        (``partial``) instead of ``failed`` while entries were still being processed.
        """
        states = store.work_states(self.engine, c)
        if states - {WorkState.FAILED} or ranges.ranges_left(self.engine, c.collection_id, 1):
            store.release_to_wait(self.engine, c, self.defer_seconds, for_all=True)
            return StepReport(c.collection_slug, c.phase, Action.WAITING)
        if states:
            self._fail(c, ErrorCode.RECONCILIATION_ENTRY_FAILED, terminal=True)
            return StepReport(c.collection_slug, c.phase, Action.FAILED)
        return None

    def _fail(self, c: Coordinator, code: ErrorCode, *, terminal: bool = False) -> None:
        if terminal or policy.is_terminal(code, c.attempt_count):
            store.record_failed(self.engine, c, code)
        else:
            store.record_retry(self.engine, c, code, policy.retry_delay_seconds(c.attempt_count))
