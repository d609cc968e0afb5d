"""Prometheus metrics, read from the database when scraped (at most once per cache period).

Every figure comes from the tables, so any API replica reports the same numbers and nothing is
lost when a worker restarts. Dropped invalid messages are counted by each worker in memory
(``celery inspect stats``), not in the database, so they are not here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import sqlalchemy as sa
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from media_usage_worker.api import CleanupCounts, MediaUsage, StatusOverview
from media_usage_worker.domain.vocabulary import CoverageStatus, WorkState


class IndexCollector(Collector):
    """The collector the API's registry holds; ``collect`` runs on each scrape."""

    def __init__(self, engine: sa.Engine, cache_seconds: int) -> None:
        self._engine = engine
        self._index = MediaUsage(engine)
        self._cache_seconds = cache_seconds
        self._lock = threading.Lock()
        self._read_at = float("-inf")
        self._metrics: list[Metric] = []

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if time.monotonic() - self._read_at >= self._cache_seconds:
                self._metrics = self._read()
                self._read_at = time.monotonic()
            yield from self._metrics

    def _read(self) -> list[Metric]:
        started = time.monotonic()
        up = GaugeMetricFamily("media_usage_up", "1 when the last read of the database worked.")
        try:
            overview = self._index.status()
            counts = self._index.cleanup_counts()
        except sa.exc.SQLAlchemyError:
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        duration = GaugeMetricFamily(
            "media_usage_scrape_duration_seconds", "Time the last read of the database took."
        )
        duration.add_metric([], time.monotonic() - started)
        return [up, duration, *_families(overview), *_cleanup_families(counts)]


def _families(overview: StatusOverview) -> list[Metric]:
    def gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
        return GaugeMetricFamily(f"media_usage_{name}", doc, labels=labels)

    capture = gauge("capture_active", "1 when capture triggers are active.", [])
    capture.add_metric([], 1 if overview.capture == "active" else 0)
    items = gauge("work_items", "Work rows by collection and state.", ["collection", "state"])
    failed = gauge("failed_items", "Work rows that failed for good.", ["collection"])
    oldest = gauge(
        "oldest_due_age_seconds", "Age of the oldest due item (0: none due).", ["collection"]
    )
    complete = gauge(
        "coverage_complete",
        '1 when the collection coverage is complete ("used nowhere" can be trusted).',
        ["collection"],
    )
    status = gauge(
        "coverage_status", "1 for the collection's coverage status.", ["collection", "status"]
    )
    rules = gauge(
        "rules_stale",
        "1 when the index was computed under other extraction rules than those running.",
        ["collection"],
    )
    running = gauge(
        "reconciliation_phase",
        "1 for the phase and state of the collection's reconciliation run, if any.",
        ["collection", "phase", "state"],
    )
    attempts = gauge(
        "reconciliation_attempts", "Attempts of the reconciliation run.", ["collection"]
    )
    for c in [*overview.collections, *overview.sources]:
        # A source beyond content is labelled by its kind (settings, user, table:menus).
        c = replace(c, slug=c.slug if c.kind == "content" else c.kind)
        for state in WorkState:
            items.add_metric([c.slug, state.value], c.work.get(state, 0))
        failed.add_metric([c.slug], c.work.get(WorkState.FAILED, 0))
        oldest.add_metric([c.slug], c.oldest_due_age_seconds or 0.0)
        complete.add_metric([c.slug], 1 if c.coverage == CoverageStatus.COMPLETE else 0)
        for value in CoverageStatus:
            status.add_metric([c.slug, value.value], 1 if c.coverage == value else 0)
        indexed_under = c.rules.get("indexed_under")
        rules.add_metric([c.slug], 0 if indexed_under in (None, c.rules.get("running")) else 1)
        if c.reconciliation is not None:
            run = c.reconciliation
            running.add_metric([c.slug, str(run["phase"]), str(run["state"])], 1)
            attempts.add_metric([c.slug], int(run["attempts"] or 0))
    deleting = gauge(
        "collection_deletion",
        "1 for each collection deletion under way, with its phase and state.",
        ["collection", "phase", "state"],
    )
    for d in overview.deletions:
        deleting.add_metric([d["collection_slug"], str(d["phase"]), str(d["state"])], 1)
    return [capture, items, failed, oldest, complete, status, rules, running, attempts, deleting]


def _cleanup_families(counts: CleanupCounts) -> list[Metric]:
    shown = [
        ("retired_items", "Media items in the quarantine (retired, not purged).", counts.retired),
        ("dangling_references", "References to a media id no library item has.",
         counts.dangling),
        ("restored_by_use", "Retired items a later write used, restored by the worker.",
         counts.restored_by_use),
        ("purged_files_undelivered", "Purged items' files not yet handed to the host.",
         counts.undelivered_files),
        ("purged_files_parked", "Undelivered files no longer tried (purge --undelivered).",
         counts.parked_files),
    ]  # fmt: skip
    families: list[Metric] = []
    for name, doc, value in shown:
        family = GaugeMetricFamily(f"media_usage_{name}", doc)
        family.add_metric([], value)
        families.append(family)
    return families
