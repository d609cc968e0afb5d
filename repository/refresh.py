"""Refresh one entry's slice of the index (facts sheet §8.1, durable mode).

Reads the entry, builds its snapshots, checks the per-item limits and rewrites each source
whose projection changed, all under the projection module's compare-and-sets. Returns ``None``
on success or one of the refresh codes that the processor maps to work error codes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import sqlalchemy as sa

from media_usage_worker.domain.errors import EntryTooLarge
from media_usage_worker.domain.extraction import FieldDiscoveryError, extraction_fields
from media_usage_worker.domain.policy import Limits
from media_usage_worker.domain.snapshots import (
    DISPLAY_FIELDS,
    ContentEntry,
    SnapshotSet,
    build_snapshots,
)
from repository import projection
from repository.collections import load_fields
from repository.db import Bind, transaction
from repository.identity import registered

GENERATION_CONFLICT = "CONTENT_USAGE_GENERATION_CONFLICT"
RESOURCE_LIMIT = "CONTENT_USAGE_RESOURCE_LIMIT"
REFRESH_ERROR = "CONTENT_USAGE_REFRESH_ERROR"
MAX_ATTEMPTS = 2

log = logging.getLogger(__name__)


def refresh_entry(
    bind: Bind,
    entry: ContentEntry,
    limits: Limits,
    fence: Sequence[sa.ColumnElement[bool]] = (),
    *,
    reraise: tuple[type[BaseException], ...] = (),
) -> str | None:
    """Bring the entry's sources up to date; a lost race is retried once.

    ``fence`` guards every index write (the caller's live lease), so a processor that lost its
    lease mid-refresh writes nothing. Exceptions of the ``reraise`` types (a worker's time limit)
    are not refresh errors: they propagate to the caller, which knows what they mean.
    """
    try:
        for _ in range(MAX_ATTEMPTS):
            code = _attempt(bind, entry, limits, fence)
            if code != GENERATION_CONFLICT:
                return code
        return GENERATION_CONFLICT
    except FieldDiscoveryError:
        return FieldDiscoveryError.code
    except EntryTooLarge:
        return RESOURCE_LIMIT
    except Exception as exc:
        if isinstance(exc, reraise):
            raise
        log.exception("media usage refresh of %s failed", entry)
        return REFRESH_ERROR


def _attempt(
    bind: Bind,
    entry: ContentEntry,
    limits: Limits,
    fence: Sequence[sa.ColumnElement[bool]],
) -> str | None:
    with transaction(bind) as conn:
        observed = projection.observed_sources(conn, entry)
        fields = load_fields(conn, entry.collection_id)
        extraction = extraction_fields(fields)
        display = [name for name in DISPLAY_FIELDS if any(f.slug == name for f in fields)]
        row, revision = projection.load_entry(
            conn,
            entry,
            [f.slug for f in extraction] + display,
            as_text={f.slug for f in fields if f.column_type == "JSON"},
        )
        collection_present = (
            row is not None
            or conn.execute(
                sa.select(registered(entry.collection_id, entry.collection_slug))
            ).scalar_one()
        )
    if not collection_present:
        return GENERATION_CONFLICT
    if row is None:
        # The entry is gone: remove its sources, but only while it stays gone.
        for source in observed.values():
            if not projection.delete_source_if_matching(
                bind, source, content_absent=True, fence=fence
            ):
                return GENERATION_CONFLICT
        return None

    snapshots = build_snapshots(
        collection_id=entry.collection_id,
        collection_slug=entry.collection_slug,
        fields=extraction,
        row=row,
        display_fields=display,
        revision=revision,
        limits=limits,
    )
    if snapshots.draft_error is not None:
        return snapshots.draft_error
    if _over_limits(snapshots, observed, limits):
        return RESOURCE_LIMIT
    for snapshot in snapshots.snapshots:
        current = observed.get(snapshot.variant)
        if current is not None and projection.is_unchanged(snapshot, current):
            with transaction(bind) as conn:
                if projection.still_unchanged(conn, snapshot, current):
                    continue
            return GENERATION_CONFLICT
        if not projection.replace_source_if_matching(bind, snapshot, current, fence):
            return GENERATION_CONFLICT
    wanted = {snapshot.variant for snapshot in snapshots.snapshots}
    for variant, source in observed.items():
        if variant not in wanted and not projection.delete_source_if_matching(
            bind, source, content_absent=False, fence=fence
        ):
            return GENERATION_CONFLICT
    return None


def _over_limits(snapshots: SnapshotSet, observed: dict, limits: Limits) -> bool:
    """Only projections that would be written count against the item's limits."""
    changed = [
        s for s in snapshots.snapshots if not projection.is_unchanged(s, observed.get(s.variant))
    ]
    occurrences = sum(len(s.occurrences) for s in changed)
    size = sum(s.byte_length for s in changed)
    return occurrences > limits.max_occurrences or size > limits.max_index_bytes
