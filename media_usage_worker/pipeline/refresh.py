"""Refresh entries' slices of the index (docs/design.md §10).

``plan_refresh`` turns what was read of one entry into the ``EntryWrite`` that brings its
sources up to date (or the ``RefreshCode`` saying why not): snapshots, per-item limits and the
compare-and-set of every part. ``refresh_entry`` reads, plans and writes one entry on its own;
``refresh_entries`` does the same for a page of entries without leases (repair), and the
batch path (``pipeline.batch``) for leased work items, each with one read and one write.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from media_usage_worker.domain.errors import EntryTooLarge, FieldDiscoveryError, UnreadableValue
from media_usage_worker.domain.extraction import MediaUrls
from media_usage_worker.domain.policy import Limits
from media_usage_worker.domain.refresh_plan import (
    CollectionState,
    EntryWrite,
    StorageKeys,
    columns_to_read,
    plan_refresh,
)
from media_usage_worker.domain.snapshots import ContentEntry
from media_usage_worker.domain.vocabulary import RefreshCode
from media_usage_worker.domain.work import Lease
from media_usage_worker.repository.base.db import Bind
from media_usage_worker.repository.index import projection
from media_usage_worker.repository.index.source_writes import write_entries, write_entry

PlanOne = Callable[[str, MediaUrls], "EntryWrite | RefreshCode"]
__all__ = [
    "columns_to_read",
    "describe",
    "media_urls",
    "plan_entries",
    "plan_entry",
    "plan_refresh",
    "refresh_entries",
    "refresh_entry",
    "refresh_error",
]

# A refresh that loses a race to a concurrent writer reads again once before giving up.
REFRESH_ATTEMPTS = 2
# A failure's cause in a log line: enough to recognise it, never a whole entry.
CAUSE_CHARS = 300

log = logging.getLogger(__name__)


def plan_entry(
    bind: Bind,
    state: CollectionState,
    content_id: str,
    limits: Limits,
    lease: Lease | None,
    keys: StorageKeys,
) -> EntryWrite | RefreshCode:
    """``plan_refresh`` of one entry of ``state``, its media file URLs resolved: storage keys
    the plan met that ``keys`` has not read yet are read in one statement, and the entry is
    planned again with them. ``keys`` is shared by the entries of one read."""
    urls = MediaUrls(state.media_url_prefixes, keys)
    entry = state.entries[content_id]
    plan = plan_refresh(entry, state.fields, limits, lease, urls=urls)
    if keys.missing:
        keys.learn(projection.media_ids_by_storage_keys(bind, keys.missing))
        plan = plan_refresh(entry, state.fields, limits, lease, urls=urls)
    return plan


Plan = EntryWrite | RefreshCode


def plan_entries(
    bind: Bind, state: CollectionState, content_ids: Sequence[str], plan_one: PlanOne
) -> dict[str, Plan]:
    """``plan_one`` of each entry of ``state`` (the caller's ``plan_refresh`` with its own error
    handling), media file URLs resolved: the entries are planned once with the storage keys
    known so far, every key they met and nobody had read is read in one statement, and only
    the entries that met such a key are planned again."""
    keys = StorageKeys()
    urls = MediaUrls(state.media_url_prefixes, keys)
    plans: dict[str, Plan] = {}
    again: list[str] = []
    for content_id in content_ids:
        misses = keys.misses
        plans[content_id] = plan_one(content_id, urls)
        if keys.misses > misses:
            again.append(content_id)
    if again:
        keys.learn(projection.media_ids_by_storage_keys(bind, keys.missing))
        for content_id in again:
            plans[content_id] = plan_one(content_id, urls)
    return plans


def media_urls(bind: Bind, state: CollectionState) -> MediaUrls:
    """The media URLs of every entry of ``state``, read at once: for a caller that plans with
    ``plan_refresh`` itself (``plan_entry`` reads them as it goes)."""
    keys = StorageKeys()
    urls = MediaUrls(state.media_url_prefixes, keys)
    for entry in state.entries.values():
        try:
            plan_refresh(entry, state.fields, Limits(), None, urls=urls)
        except (EntryTooLarge, FieldDiscoveryError, UnreadableValue):
            continue
    keys.learn(projection.media_ids_by_storage_keys(bind, keys.missing))
    return urls


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
            plan = plan_entry(bind, state, entry.content_id, limits, lease, StorageKeys())
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

    def plan_one(content_id: str, urls: MediaUrls) -> Plan:
        entry = state.entries[content_id]
        try:
            return plan_refresh(entry, state.fields, limits, None, urls=urls)
        except Exception as exc:
            return refresh_error(entry.entry, exc)

    for content_id, plan in plan_entries(bind, state, content_ids, plan_one).items():
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
    if isinstance(exc, FieldDiscoveryError | UnreadableValue):
        return exc.code
    if isinstance(exc, EntryTooLarge):
        return RefreshCode.RESOURCE_LIMIT
    log.error("media usage refresh of %s failed", entry, exc_info=exc)
    return RefreshCode.REFRESH_ERROR


def describe(exc: BaseException) -> str:
    """One line naming what went wrong, short enough for a log line."""
    text = " ".join(str(exc).split())
    cause = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return cause if len(cause) <= CAUSE_CHARS else cause[: CAUSE_CHARS - 1] + "…"
