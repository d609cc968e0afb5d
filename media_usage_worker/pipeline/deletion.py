"""Deleting a collection (docs/design.md, "Deleting a collection").

``delete_collection`` writes the tombstone and runs the front phases in the call: ``fence``
(content writes now fail), ``registry``, ``table``. The back phases (``work``, ``sources``,
``status``, ``finalize``) delete what is left a batch at a time from ``DeletionProcessor``,
which the ``media_usage.deletion_tick`` task runs; each batch is one transaction guarded by
the tombstone's lease, so a worker killed anywhere leaves a deletion the next tick resumes from
its cursor. The statements are ``repository.deletion``; this module decides which to run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from media_usage_worker.domain import deletion as deletion_policy
from media_usage_worker.domain.content_model import validate_collection_slug
from media_usage_worker.domain.errors import CollectionNotFound
from media_usage_worker.domain.vocabulary import (
    DeletionOutcome,
    DeletionPhase,
    DeletionState,
    DeletionStepEnd,
)
from media_usage_worker.repository.lifecycle import deletion as store
from media_usage_worker.repository.lifecycle.deletion import Step, Tombstone
from media_usage_worker.repository.registry import collections

if TYPE_CHECKING:
    from sqlalchemy import Engine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeletionResult:
    collection_slug: str
    outcome: DeletionOutcome
    # Where the deletion stands (``None`` once nothing of it is left).
    phase: DeletionPhase | None = None
    state: DeletionState | None = None


def delete_collection(
    engine: Engine,
    slug: str,
    *,
    force: bool = False,
    lease_seconds: int = deletion_policy.DELETION_LEASE_SECONDS,
) -> DeletionResult:
    """Delete the collection ``slug``: ``deleted`` once its content is gone (the rest follows
    as work), ``has_content`` when live entries remain and ``force`` is not set (nothing
    changed), ``in_progress`` when another caller holds the deletion now, ``already_deleted``
    when an earlier call already deleted it (its clean-up goes on as work). A deletion
    interrupted before the collection was gone is continued. Raises ``CollectionNotFound``,
    or ``DeletionConflict`` for a deletion already under way with the other ``force``."""
    validate_collection_slug(slug)
    tombstone = store.find(engine, slug=slug)
    if tombstone is not None and not deletion_policy.is_front(tombstone.phase):
        return DeletionResult(
            slug, DeletionOutcome.ALREADY_DELETED, tombstone.phase, tombstone.state
        )
    if tombstone is None:
        collection = collections.find_collection(engine, slug)
        if collection is None:
            raise CollectionNotFound(f"No collection has slug {slug!r}.")
        tombstone = store.create(engine, collection.id, slug, force)
    else:
        tombstone = store.create(engine, tombstone.collection_id, slug, force)
    for _ in deletion_policy.FRONT_PHASES:
        current = store.find(engine, collection_id=tombstone.collection_id)
        if current is None:  # removed: a has_content answer, or (later) finished
            gone = collections.find_collection(engine, slug) is None
            return DeletionResult(
                slug, DeletionOutcome.DELETED if gone else DeletionOutcome.HAS_CONTENT
            )
        if not deletion_policy.is_front(current.phase):
            return DeletionResult(slug, DeletionOutcome.DELETED, current.phase, current.state)
        held = store.claim(engine, current.collection_id, lease_seconds)
        if held is None:
            return DeletionResult(slug, DeletionOutcome.IN_PROGRESS, current.phase, current.state)
        step = run_step(engine, held)
        if step == DeletionStepEnd.HAS_CONTENT:
            return DeletionResult(slug, DeletionOutcome.HAS_CONTENT)
        if isinstance(step, DeletionStepEnd):  # lost the lease; or (not a front phase) finished
            return DeletionResult(slug, DeletionOutcome.IN_PROGRESS, current.phase, current.state)
        store.release(engine, step)
    final = store.find(engine, collection_id=tombstone.collection_id)
    return DeletionResult(
        slug,
        DeletionOutcome.DELETED,
        final.phase if final else None,
        final.state if final else None,
    )


def run_step(engine: Engine, held: Tombstone, batch_size: int = deletion_policy.BATCH_SIZE) -> Step:
    """One step of the held deletion's current phase: the tombstone as the step left it, or
    how the deletion ended (``DeletionStepEnd``). A step that raises is recorded (retry or
    failed) and re-raised."""
    steps: dict[DeletionPhase, Callable[[], Step]] = {
        DeletionPhase.FENCE: lambda: store.fence(engine, held),
        DeletionPhase.REGISTRY: lambda: store.drop_registry(engine, held),
        DeletionPhase.TABLE: lambda: store.drop_table(engine, held),
        DeletionPhase.WORK: lambda: store.delete_work_batch(engine, held, batch_size),
        DeletionPhase.SOURCES: lambda: store.delete_sources_batch(engine, held, batch_size),
        DeletionPhase.STATUS: lambda: store.clear_status(engine, held),
        DeletionPhase.FINALIZE: lambda: store.finalize(engine, held),
    }
    try:
        return steps[held.phase]()
    except Exception:
        state = store.record_failure(engine, held)
        log.warning(
            "deletion of %s failed in phase %s (%s)", held.collection_slug, held.phase, state,
            exc_info=True,
        )  # fmt: skip
        raise


@dataclass(frozen=True)
class DeletionReport:
    collection_slug: str
    steps: int
    phase: DeletionPhase | None  # where it stands after the tick; None when finished
    finished: bool


class DeletionProcessor:
    """Advances due deletions, one at a time, until the tick's time budget is spent."""

    def __init__(
        self,
        engine: Engine,
        *,
        lease_seconds: int = deletion_policy.DELETION_LEASE_SECONDS,
        batch_size: int = deletion_policy.BATCH_SIZE,
        budget_seconds: float = 5.0,
        candidates: int = 4,
    ) -> None:
        self.engine = engine
        self.lease_seconds = lease_seconds
        self.batch_size = batch_size
        self.budget_seconds = budget_seconds
        self.candidates = candidates

    def tick(self) -> list[DeletionReport]:
        # Monotonic time bounds the tick's own work; leases and due times are the database's.
        deadline = time.monotonic() + self.budget_seconds
        reports = []
        for collection_id in store.due_ids(self.engine, self.candidates):
            if time.monotonic() >= deadline:
                break
            held = store.claim(self.engine, collection_id, self.lease_seconds)
            if held is not None:
                reports.append(self._advance(held, deadline))
        return reports

    def _advance(self, held: Tombstone, deadline: float) -> DeletionReport:
        steps = 0
        current: Tombstone = held
        while True:
            try:
                step = run_step(self.engine, current, self.batch_size)
            except Exception:
                return DeletionReport(current.collection_slug, steps, current.phase, False)
            steps += 1
            if step == DeletionStepEnd.LEASE_LOST:  # another worker took over
                return DeletionReport(current.collection_slug, steps, current.phase, False)
            if isinstance(step, DeletionStepEnd):  # finished, or withdrawn (has content)
                return DeletionReport(current.collection_slug, steps, None, True)
            current = step
            if time.monotonic() >= deadline:
                store.release(self.engine, current)
                return DeletionReport(current.collection_slug, steps, current.phase, False)


def reopen(engine: Engine, slug: str) -> Tombstone | None:
    """A failed deletion of ``slug`` made due again (its attempts start over); ``None`` when
    there is none, or it is pending or running now."""
    validate_collection_slug(slug)
    return store.reopen(engine, slug)
