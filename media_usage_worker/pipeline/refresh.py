"""Refresh one entry's slice of the index (docs/design.md §10).

Reads the entry, builds its snapshots, checks the per-item limits and rewrites each source
whose projection changed, all under the projection repository's compare-and-sets. Returns
``None`` on success or the ``RefreshCode`` that the processor maps to a work error code.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.errors import EntryTooLarge, FieldDiscoveryError
from media_usage_worker.domain.extraction import extraction_fields
from media_usage_worker.domain.policy import Limits
from media_usage_worker.domain.snapshots import (
    DISPLAY_FIELDS,
    ContentEntry,
    SnapshotSet,
    build_snapshots,
)
from media_usage_worker.domain.vocabulary import RefreshCode
from media_usage_worker.domain.work import Lease
from repository import projection
from repository.db import Bind

# A refresh that loses a race to a concurrent writer reads again once before giving up.
REFRESH_ATTEMPTS = 2

log = logging.getLogger(__name__)


def refresh_entry(
    bind: Bind,
    entry: ContentEntry,
    limits: Limits,
    lease: Lease | None = None,
    *,
    reraise: tuple[type[BaseException], ...] = (),
) -> RefreshCode | None:
    """Bring the entry's sources up to date; a lost race is retried once.

    ``lease`` fences every index write (the caller's live lease), so a processor that lost its
    lease mid-refresh writes nothing. Exceptions of the ``reraise`` types (a worker's time limit)
    are not refresh errors: they propagate to the caller, which knows what they mean.
    """
    try:
        for _ in range(REFRESH_ATTEMPTS):
            code = _attempt(bind, entry, limits, lease)
            if code != RefreshCode.GENERATION_CONFLICT:
                return code
        return RefreshCode.GENERATION_CONFLICT
    except FieldDiscoveryError:
        return FieldDiscoveryError.code
    except EntryTooLarge:
        return RefreshCode.RESOURCE_LIMIT
    except Exception as exc:
        if isinstance(exc, reraise):
            raise
        log.exception("media usage refresh of %s failed", entry)
        return RefreshCode.REFRESH_ERROR


def _columns_to_read(fields: list[FieldDefinition]) -> list[str]:
    return [f.slug for f in extraction_fields(fields)] + _display_fields(fields)


def _display_fields(fields: list[FieldDefinition]) -> list[str]:
    return [name for name in DISPLAY_FIELDS if any(f.slug == name for f in fields)]


def _attempt(
    bind: Bind, entry: ContentEntry, limits: Limits, lease: Lease | None
) -> RefreshCode | None:
    state = projection.read_entry_state(bind, entry, _columns_to_read)
    if not state.collection_present:
        return RefreshCode.GENERATION_CONFLICT
    if state.row is None:
        # The entry is gone: remove its sources, but only while it stays gone.
        return _remove(bind, state.observed.values(), lease, content_absent=True)
    snapshots = build_snapshots(
        collection_id=entry.collection_id,
        collection_slug=entry.collection_slug,
        fields=extraction_fields(state.fields),
        row=state.row,
        display_fields=_display_fields(state.fields),
        revision=state.revision,
        limits=limits,
    )
    if snapshots.draft_error is not None:
        return snapshots.draft_error
    if _over_limits(snapshots, state.observed, limits):
        return RefreshCode.RESOURCE_LIMIT
    code = _write_changed(bind, snapshots, state.observed, lease)
    if code is not None:
        return code
    wanted = {snapshot.variant for snapshot in snapshots.snapshots}
    unwanted = [source for variant, source in state.observed.items() if variant not in wanted]
    return _remove(bind, unwanted, lease, content_absent=False)


def _write_changed(
    bind: Bind,
    snapshots: SnapshotSet,
    observed: dict[str, dict[str, Any]],
    lease: Lease | None,
) -> RefreshCode | None:
    """Write each snapshot whose projection changed; an unchanged one must still be as read."""
    for snapshot in snapshots.snapshots:
        current = observed.get(snapshot.variant)
        if current is not None and projection.is_unchanged(snapshot, current):
            if not projection.still_unchanged(bind, snapshot, current):
                return RefreshCode.GENERATION_CONFLICT
        elif not projection.replace_source_if_matching(bind, snapshot, current, lease):
            return RefreshCode.GENERATION_CONFLICT
    return None


def _remove(
    bind: Bind,
    sources: Iterable[dict[str, Any]],
    lease: Lease | None,
    *,
    content_absent: bool,
) -> RefreshCode | None:
    for source in sources:
        if not projection.delete_source_if_matching(
            bind, source, content_absent=content_absent, lease=lease
        ):
            return RefreshCode.GENERATION_CONFLICT
    return None


def _over_limits(
    snapshots: SnapshotSet, observed: dict[str, dict[str, Any]], limits: Limits
) -> bool:
    """Only projections that would be written count against the item's limits."""
    changed = [
        s for s in snapshots.snapshots if not projection.is_unchanged(s, observed.get(s.variant))
    ]
    occurrences = sum(len(s.occurrences) for s in changed)
    size = sum(s.byte_length for s in changed)
    return occurrences > limits.max_occurrences or size > limits.max_index_bytes
