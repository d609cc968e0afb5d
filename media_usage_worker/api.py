"""The Python read API: where media is used, and whether "used nowhere" can be trusted.

One small, typed surface for host code, scripts and this project's own CLI (``docs/api.md``)::

    from media_usage_worker.api import MediaUsage

    with MediaUsage.connect("postgresql+psycopg://...") as index:
        if index.is_unused("01J...MEDIA") is True:
            ...  # safe to delete: no entry uses it, and the index is complete

Every answer is read in one transaction, so a count and the coverage it comes with agree. A
count is ``None`` when coverage is not complete: the index cannot then say "nowhere". Ids,
limits and cursors are validated before any statement runs (``InvalidArgument``, a
``ValueError``). The names here are stable; the modules under them are not.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain import validation as check
from media_usage_worker.domain.cleanup import (
    RestoreResult,
    RetireRefusal,
    RetireResult,
    UnusedFilter,
    UnusedItem,
    UnusedPage,
)
from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.cursor import SLUG_ORDER, decode_cursor, usage_scope
from media_usage_worker.domain.errors import InvalidArgument
from media_usage_worker.domain.host_sources import HostSource
from media_usage_worker.domain.pace import Pace, Sample
from media_usage_worker.domain.vocabulary import DeletionState
from media_usage_worker.domain.work import Page
from media_usage_worker.pipeline import cleanup
from media_usage_worker.repository.base.db import read_transaction
from media_usage_worker.repository.index import usage as usage_store
from media_usage_worker.repository.index.usage import Coverage, ScopeCoverage, UsageEntry, UsagePage
from media_usage_worker.repository.lifecycle import deletion as deletion_store
from media_usage_worker.repository.lifecycle.deletion import DeletionPage
from media_usage_worker.repository.migration.migrate import open_migrated
from media_usage_worker.repository.quarantine import audit_log, listing
from media_usage_worker.repository.quarantine import purge as purge_store
from media_usage_worker.repository.quarantine.cleanup import (
    CleanupCounts,
    DanglingRead,
    cleanup_counts,
    dangling,
)
from media_usage_worker.repository.quarantine.listing import MediaItem
from media_usage_worker.repository.quarantine.purge import Undelivered
from media_usage_worker.repository.reconciling import status as status_store
from media_usage_worker.repository.reconciling.status import CollectionStatus, IndexTotals
from media_usage_worker.repository.registry import collections as registry
from media_usage_worker.repository.registry import host_sources, rules
from media_usage_worker.repository.registry.collections import Collection
from media_usage_worker.repository.registry.rules import DeclaredRules
from media_usage_worker.repository.work_queue import pace as pace_store
from media_usage_worker.repository.work_queue import work_operator

__all__ = [
    "MAX_IDS",
    "CleanupCounts",
    "Collection",
    "CollectionStatus",
    "Coverage",
    "DanglingRead",
    "DeclaredRules",
    "DeletionPage",
    "IndexTotals",
    "MediaItem",
    "MediaUsage",
    "RestoreResult",
    "RetireRefusal",
    "RetireResult",
    "Sample",
    "ScopeCoverage",
    "StatusOverview",
    "Undelivered",
    "UnusedItem",
    "UnusedPage",
    "UsageCounts",
    "UsageEntry",
    "UsagePage",
]

# Ids one ``usage_counts`` call answers; larger sets are asked for in several calls.
MAX_IDS = 1000
# Actions one audit page holds.
MAX_AUDIT = 1000


@dataclass(frozen=True)
class UsageCounts:
    """Live entries using each media id; every count is ``None`` unless ``coverage.complete``."""

    coverage: Coverage
    counts: dict[str, int | None]


@dataclass(frozen=True)
class StatusOverview:
    """Capture state, aggregate coverage (of every collection and every source), each
    collection's coverage, work and failures, the collection deletions under way (each: slug,
    state, phase, attempts, last error), and each source beyond content's as its collections'
    (``kind`` says which: docs/operations.md, "Sources")."""

    capture: str
    coverage: str
    collections: list[CollectionStatus]
    deletions: list[dict[str, Any]] = field(default_factory=list)
    sources: list[CollectionStatus] = field(default_factory=list)
    # The clean-up: items in the quarantine, purged files not yet delivered, and those of them
    # parked (no longer tried: ``media-usage purge --undelivered``).
    cleanup: dict[str, int] = field(default_factory=dict)
    # Whether the workers keep up with the site's writes over the last minute (``None``
    # until the dispatch tick has sampled it twice).
    pace: Pace | None = None


class MediaUsage:
    """Read access to one database's media usage index."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    @classmethod
    @contextmanager
    def connect(cls, database_url: str) -> Iterator[MediaUsage]:
        """An index on its own engine, disposed on leaving the block. A database that does not
        exist (a SQLite path with no file is never created) or is not migrated is
        ``DatabaseNotReady``, saying what to run."""
        engine = open_migrated(database_url)
        try:
            yield cls(engine)
        finally:
            engine.dispose()

    def coverage(self) -> Coverage:
        """Whether the index covers all content (``complete``), per collection and overall."""
        with read_transaction(self._engine) as conn:
            return usage_store.read_coverage(conn)

    def usage_counts(self, media_ids: Sequence[str]) -> UsageCounts:
        """Distinct live (not trashed) entries using each of up to ``MAX_IDS`` media ids."""
        if isinstance(media_ids, str) or not isinstance(media_ids, Sequence):
            raise InvalidArgument("media_ids must be a sequence of media ids.")
        if len(media_ids) > MAX_IDS:
            raise InvalidArgument(f"At most {MAX_IDS} media ids per call, not {len(media_ids)}.")
        ids = [check.named_identifier("each media id", i) for i in media_ids]
        with read_transaction(self._engine) as conn:
            coverage = usage_store.read_coverage(conn)
            counts = usage_store.usage_counts(conn, ids) if ids else {}
        known = coverage.complete
        return UsageCounts(coverage, {i: (counts[i] if known else None) for i in ids})

    def usage_count(self, media_id: str) -> int | None:
        """Live entries using ``media_id``; ``None`` while coverage is not complete."""
        return self.usage_counts([media_id]).counts[media_id]

    def is_unused(self, media_id: str) -> bool | None:
        """``True`` only when no live entry uses ``media_id`` and the index is complete;
        ``None`` when that cannot be known yet. Trashed entries do not count as uses."""
        count = self.usage_count(media_id)
        return None if count is None else count == 0

    def usage(
        self, media_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> UsagePage:
        """One page of the entries using ``media_id`` (trashed ones included, with
        ``deleted_at``), by collection slug and content id, ``limit`` (1 to 100, default 50)
        at a time; pass ``next_cursor`` on."""
        check.named_identifier("media_id", media_id)
        decode_cursor(cursor, SLUG_ORDER, scope=usage_scope(media_id))
        return usage_store.usage_page(self._engine, media_id, limit=limit, cursor=cursor)

    def status(self) -> StatusOverview:
        """What ``media-usage status`` shows: capture, coverage, work counts, failures."""
        capture, coverage, scopes = status_store.overview(self._engine)
        under_way = [t.shown() for t in deletion_store.standing(self._engine)]
        collections = [s for s in scopes if s.kind == "content"]
        sources = [s for s in scopes if s.kind != "content"]
        cleanup = purge_store.quarantine_counts(self._engine)
        pace = pace_store.read_pace(self._engine)
        return StatusOverview(capture, coverage, collections, under_way, sources, cleanup, pace)

    # --- clean-up (docs/operations.md, "Cleaning up unused media") -----------------------

    def unused(
        self,
        limit: int | None = None,
        cursor: str | None = None,
        *,
        older_than: int | None = None,
        mime_prefix: str | None = None,
        include_trashed_only: bool = False,
    ) -> UnusedPage:
        """One page of the library items no source uses (``include_trashed_only``: the items
        only trashed entries use, instead), by id, with the whole selection's count and
        bytes; ``older_than`` days, ``mime_prefix`` (``image/``) narrow it. Only while
        coverage is complete; otherwise ``known`` is False and the page empty."""
        chosen = UnusedFilter(older_than, mime_prefix, include_trashed_only)
        return cleanup.unused(self._engine, chosen, limit=limit, cursor=cursor)

    def retire(self, media_ids: Sequence[str], *, actor: str = "python") -> RetireResult:
        """Move each id no source uses from the library into the quarantine, behind the write
        fence (docs/design.md §13); each refused id with its reason (``used``,
        ``not_known_yet``, ``not_in_library``, ``already_retired``)."""
        return cleanup.retire(self._engine, list(media_ids), actor=actor)

    def restore(self, media_ids: Sequence[str], *, actor: str = "python") -> RestoreResult:
        """Put retired items back into the library exactly as they were."""
        return cleanup.restore(self._engine, list(media_ids), actor=actor)

    # --- what an operator looks at (docs/operations.md; the CLI, HTTP and the console) -----

    def collections(self) -> list[Collection]:
        """Every registered collection, by slug."""
        return registry.list_collections(self._engine)

    def collection(self, slug: str) -> Collection | None:
        return registry.find_collection(self._engine, slug)

    def fields(self, collection_id: str) -> list[FieldDefinition]:
        """The fields a collection (or a source beyond content) is indexed with now."""
        return registry.load_fields(self._engine, collection_id)

    def sources(self) -> list[tuple[HostSource, str | None, list[str]]]:
        """Every source beyond content, with its coverage status (``None``: no coverage row)
        and the reference paths declared into it."""
        return host_sources.list_with_coverage(self._engine)

    def declared_rules(self) -> DeclaredRules:
        """The reference paths and media URL prefixes the site declares."""
        return rules.read_declared_rules(self._engine)

    def indexed_totals(self) -> dict[str, IndexTotals]:
        """Per scope: entries with a current source, and their current references."""
        return status_store.index_totals(self._engine)

    def work(
        self,
        collection_slug: str,
        *,
        state: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page | None:
        """A newest-first page of one collection's work rows (``None``: no such collection)."""
        return work_operator.find_operator_page(
            self._engine, collection_slug=collection_slug, state=state, limit=limit, cursor=cursor
        )

    def deletions(
        self, state: DeletionState | None = None, limit: int = 50, cursor: str | None = None
    ) -> DeletionPage:
        """Collection deletions in ``state`` (all when ``None``), newest change first."""
        return deletion_store.page(self._engine, state, check.operator_limit(limit), cursor)

    def dangling(self, limit: int) -> DanglingRead:
        """References to media ids the library does not have (at most ``limit``), and how many
        there are in all."""
        return dangling(self._engine, check.operator_limit(limit))

    def audit(self, limit: int) -> list[dict[str, Any]]:
        """The clean-up's latest actions (who retired, restored, purged or forgot what), newest
        first."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_AUDIT:
            raise InvalidArgument(f"An audit page holds 1 to {MAX_AUDIT} actions.")
        return audit_log.audit_page(self._engine, limit)

    def undelivered(
        self, limit: int, after: tuple[str, str] | None = None, *, parked: bool | None = False
    ) -> list[Undelivered]:
        """Purged files not yet handed to the host, oldest first (``parked``: only those no
        longer tried; ``None``: all)."""
        return purge_store.undelivered_page(self._engine, limit, after, parked=parked)

    def cleanup_counts(self) -> CleanupCounts:
        """The clean-up's gauges: quarantine, undelivered and parked files, audit actions."""
        return cleanup_counts(self._engine)

    def media_item(self, media_id: str) -> MediaItem | None:
        """The item as the library holds it, or the quarantine (``retired_at`` set); ``None``
        when neither has it."""
        return listing.find_media_item(self._engine, check.named_identifier("media_id", media_id))

    def history(self, media_id: str, limit: int = 50) -> list[dict[str, Any]]:
        """The clean-up's actions on one item (retired, restored, purged), newest first."""
        checked = check.named_identifier("media_id", media_id)
        return listing.history(self._engine, checked, check.operator_limit(limit))

    def quarantined(
        self, limit: int | None = None, before: tuple[str, str] | None = None
    ) -> list[MediaItem]:
        """Retired items, the most recently retired first; ``before`` is the previous page's
        last (``retired_at``, id)."""
        return listing.quarantine_page(self._engine, check.operator_limit(limit), before)

    def pace_samples(self, seconds: int = 3600) -> list[Sample]:
        """The dispatch tick's samples of writes and queued work over the last ``seconds``
        (an hour at most is kept), oldest first."""
        if isinstance(seconds, bool) or not isinstance(seconds, int) or not 1 <= seconds <= 3600:
            raise InvalidArgument("A pace window is 1 to 3600 seconds.")
        return pace_store.samples_since(self._engine, seconds)
