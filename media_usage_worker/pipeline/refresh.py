"""Refresh entries' slices of the index (docs/design.md §10).

``plan_refresh`` turns what was read of one entry into the ``EntryWrite`` that brings its
sources up to date (or the ``RefreshCode`` saying why not): snapshots, per-item limits and the
compare-and-set of every part. ``refresh_entry`` reads, plans and writes one entry on its own;
``refresh_entries`` does the same for a page of entries without leases (repair), and the
batch path (``pipeline.batch``) for leased work items, each with one read and one write.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.errors import EntryTooLarge, FieldDiscoveryError
from media_usage_worker.domain.extraction import MediaUrls, extraction_fields
from media_usage_worker.domain.policy import Limits
from media_usage_worker.domain.snapshots import (
    DISPLAY_FIELDS,
    ContentEntry,
    SnapshotSet,
    build_snapshots,
)
from media_usage_worker.domain.vocabulary import RefreshCode
from media_usage_worker.domain.work import Lease
from media_usage_worker.repository import projection
from media_usage_worker.repository.db import Bind
from media_usage_worker.repository.projection import CollectionState, EntryState
from media_usage_worker.repository.source_writes import EntryWrite, write_entries, write_entry

# A refresh that loses a race to a concurrent writer reads again once before giving up.
REFRESH_ATTEMPTS = 2
# A failure's cause in a log line: enough to recognise it, never a whole entry.
CAUSE_CHARS = 300

log = logging.getLogger(__name__)


def columns_to_read(fields: list[FieldDefinition]) -> list[str]:
    """The content columns a refresh reads: media-bearing fields, then display fields."""
    return [f.slug for f in extraction_fields(fields)] + _display_fields(fields)


def _display_fields(fields: list[FieldDefinition]) -> list[str]:
    return [name for name in DISPLAY_FIELDS if any(f.slug == name for f in fields)]


def media_urls(bind: Bind, state: CollectionState) -> MediaUrls:
    """How this read's refreshes resolve media file URLs: the prefixes read with the fields,
    and each storage key looked up once."""
    lookup = functools.cache(functools.partial(projection.media_id_by_storage_key, bind))
    return MediaUrls(state.media_url_prefixes, lookup)


def refresh_entry(
    bind: Bind,
    entry: ContentEntry,
    limits: Limits,
    lease: Lease | None = None,
    *,
    reraise: tuple[type[BaseException], ...] = (),
    causes: dict[str, str] | None = None,
) -> RefreshCode | None:
    """Bring the entry's sources up to date; a lost race is retried once.

    ``lease`` fences every index write (the caller's live lease), so a processor that lost its
    lease mid-refresh writes nothing. Exceptions of the ``reraise`` types (a worker's time limit)
    are not refresh errors: they propagate to the caller, which knows what they mean. When a
    refresh raises, ``causes`` (if given) records what it raised under the entry's id.
    """
    try:
        for _ in range(REFRESH_ATTEMPTS):
            state = projection.read_entries(
                bind, entry.collection_id, entry.collection_slug, [entry.content_id],
                columns_to_read,
            )  # fmt: skip
            if not state.present:
                return RefreshCode.GENERATION_CONFLICT
            plan = plan_refresh(
                state.entries[entry.content_id], state.fields, limits, lease,
                urls=media_urls(bind, state),
            )  # fmt: skip
            if not isinstance(plan, EntryWrite):
                return plan
            if write_entry(bind, plan):
                return None
        return RefreshCode.GENERATION_CONFLICT
    except Exception as exc:
        if isinstance(exc, reraise):
            raise
        if causes is not None:
            causes[entry.content_id] = describe(exc)
        return refresh_error(entry, exc)


def refresh_entries(
    bind: Bind, collection_id: str, slug: str, content_ids: list[str], limits: Limits
) -> dict[str, RefreshCode | None]:
    """``refresh_entry`` of each entry of one collection, unfenced, read and written at once.

    One read of every entry, one transaction for every write. An entry whose compare-and-set
    lost, or whose part of the shared write raised, is refreshed again on its own, so a race or
    a hostile row costs that entry alone.
    """
    try:
        state = projection.read_entries(bind, collection_id, slug, content_ids, columns_to_read)
    except Exception as exc:
        log.info("a page's shared read failed (%s); its entries are read one by one", exc)
        return {i: _alone(bind, collection_id, slug, i, limits) for i in content_ids}
    if not state.present:
        return dict.fromkeys(content_ids, RefreshCode.GENERATION_CONFLICT)
    codes: dict[str, RefreshCode | None] = {}
    planned: dict[str, EntryWrite] = {}
    urls = media_urls(bind, state)
    for content_id in content_ids:
        entry_state = state.entries[content_id]
        try:
            plan = plan_refresh(entry_state, state.fields, limits, None, urls=urls)
        except Exception as exc:
            plan = refresh_error(entry_state.entry, exc)
        if isinstance(plan, EntryWrite):
            planned[content_id] = plan
        else:
            codes[content_id] = plan
    try:
        held = write_entries(bind, list(planned.values()))
    except Exception as exc:
        log.info("a page's shared write failed (%s); its entries are written one by one", exc)
        held = [False] * len(planned)
    for content_id, ok in zip(planned, held, strict=True):
        codes[content_id] = None if ok else _alone(bind, collection_id, slug, content_id, limits)
    return {content_id: codes[content_id] for content_id in content_ids}


def _alone(
    bind: Bind, collection_id: str, slug: str, content_id: str, limits: Limits
) -> RefreshCode | None:
    return refresh_entry(bind, ContentEntry(collection_id, slug, content_id), limits)


def refresh_error(entry: ContentEntry, exc: Exception) -> RefreshCode:
    """The code of a refresh that raised. An unexpected exception's traceback is logged here;
    the one line per retry or failure, with its cause, is the caller's (``pipeline.batch``)."""
    if isinstance(exc, FieldDiscoveryError):
        return FieldDiscoveryError.code
    if isinstance(exc, EntryTooLarge):
        return RefreshCode.RESOURCE_LIMIT
    log.error("media usage refresh of %s failed", entry, exc_info=exc)
    return RefreshCode.REFRESH_ERROR


def describe(exc: BaseException) -> str:
    """One line naming what went wrong, short enough for a log line."""
    text = " ".join(str(exc).split())
    cause = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return cause if len(cause) <= CAUSE_CHARS else cause[: CAUSE_CHARS - 1] + "…"


def plan_refresh(
    state: EntryState,
    fields: list[FieldDefinition],
    limits: Limits,
    lease: Lease | None,
    *,
    urls: MediaUrls,
) -> EntryWrite | RefreshCode:
    """What to write for one entry, or why nothing can be. May raise ``EntryTooLarge`` or
    ``FieldDiscoveryError`` (see ``refresh_error``)."""
    observed = state.observed
    if state.row is None:
        # The entry is gone: remove its sources, but only while it stays gone.
        return EntryWrite(remove=tuple(observed.values()), content_absent=True, lease=lease)
    entry = state.entry
    snapshots = build_snapshots(
        collection_id=entry.collection_id,
        collection_slug=entry.collection_slug,
        fields=extraction_fields(fields),
        row=state.row,
        display_fields=_display_fields(fields),
        revision=state.revision,
        limits=limits,
        media_urls=urls,
    )
    if snapshots.draft_error is not None:
        return snapshots.draft_error
    if _over_limits(snapshots, observed, limits):
        return RefreshCode.RESOURCE_LIMIT
    keep, replace = [], []
    for snapshot in snapshots.snapshots:
        current = observed.get(snapshot.variant)
        if current is not None and projection.is_unchanged(snapshot, current):
            keep.append((snapshot, current))
        else:
            replace.append((snapshot, current))
    wanted = {snapshot.variant for snapshot in snapshots.snapshots}
    unwanted = tuple(source for variant, source in observed.items() if variant not in wanted)
    return EntryWrite(tuple(keep), tuple(replace), unwanted, lease=lease)


def _over_limits(
    snapshots: SnapshotSet, observed: Mapping[str, Mapping[str, Any]], limits: Limits
) -> bool:
    """Only projections that would be written count against the item's limits."""
    changed = [
        s for s in snapshots.snapshots if not projection.is_unchanged(s, observed.get(s.variant))
    ]
    occurrences = sum(len(s.occurrences) for s in changed)
    size = sum(s.byte_length for s in changed)
    return occurrences > limits.max_occurrences or size > limits.max_index_bytes
