"""The refresh plan of one entry: what to write to bring its slice of the index up to date.

Pure: it works on what was read (``CollectionState``) and returns an ``EntryWrite`` (every part
with its own compare-and-set, applied by ``repository.source_writes``) or the ``RefreshCode``
saying why nothing can be written (docs/design.md §10). Media file URLs are resolved through
the ``MediaUrls`` it is given; ``StorageKeys`` answers them from keys already read and notes
the others, so the caller reads those and plans again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.extraction import MediaUrls, extraction_fields
from media_usage_worker.domain.policy import Limits
from media_usage_worker.domain.snapshots import (
    DISPLAY_FIELDS,
    ContentEntry,
    Revision,
    Snapshot,
    SnapshotSet,
    build_snapshots,
)
from media_usage_worker.domain.vocabulary import RefreshCode
from media_usage_worker.domain.work import Lease

# The source row's columns a write compares with what was read: any change means another
# writer got there first, and this write must not land.
MATCH_COLUMNS = (
    "current_generation",
    "source_completeness",
    "collection_id",
    "updated_at",
    "source_fingerprint",
    "source_updated_at",
    "source_version",
    "identity_version",
    "revision_id",
    "last_attempted_at",
    "last_error_code",
)
# The content row's revision column behind each source variant.
REVISION_COLUMN = {"columns": "live_revision_id", "draft_overlay": "draft_revision_id"}


@dataclass(frozen=True)
class EntryState:
    """What one refresh reads: the entry (``None`` if gone), its draft and its source rows."""

    entry: ContentEntry
    row: dict[str, Any] | None
    revision: Revision | None
    observed: dict[str, dict[str, Any]]  # the entry's source rows by variant


@dataclass(frozen=True)
class CollectionState:
    """One consistent read of a collection's fields and of some of its entries."""

    fields: list[FieldDefinition]
    present: bool  # the collection is still registered with this id and slug
    entries: dict[str, EntryState]  # by content id
    media_url_prefixes: tuple[str, ...] = ()


@dataclass(frozen=True)
class EntryWrite:
    """What one entry's refresh writes (``apply_writes``).

    Every part keeps its own compare-and-set: an unchanged source must still be exactly as read,
    a new generation is promoted only over the source row that was read and while the content
    row is still the version the snapshot came from, a removal only while the source is as
    read (and, with ``content_absent``, while the entry stays gone). With ``lease`` every
    statement also needs that work lease to still hold its row.
    """

    keep: tuple[tuple[Snapshot, Mapping[str, Any]], ...] = ()
    replace: tuple[tuple[Snapshot, Mapping[str, Any] | None], ...] = ()
    remove: tuple[Mapping[str, Any], ...] = ()
    content_absent: bool = False
    lease: Lease | None = None


class StorageKeys:
    """Storage key → media id as read so far (``None``: no media item has the key). A key not
    read yet answers ``None`` and is noted in ``missing``: the plan that asked is incomplete."""

    def __init__(self) -> None:
        self.known: dict[str, str | None] = {}
        self.missing: set[str] = set()
        # Every answer given for a key not read yet, counted: a plan during which this grew
        # met such a key (even one another plan had already noted) and must be made again.
        self.misses = 0

    def __call__(self, storage_key: str) -> str | None:
        if storage_key in self.known:
            return self.known[storage_key]
        self.missing.add(storage_key)
        self.misses += 1
        return None

    def learn(self, found: Mapping[str, str]) -> None:
        """Take the media ids read for ``missing`` (a key not found has no media item)."""
        self.known.update(dict.fromkeys(self.missing))
        self.known.update(found)
        self.missing.clear()


def columns_to_read(fields: list[FieldDefinition]) -> list[str]:
    """The content columns a refresh reads: media-bearing fields, then display fields."""
    read = [f.slug for f in extraction_fields(fields)]
    return read + [name for name in _display_fields(fields) if name not in read]


def _display_fields(fields: list[FieldDefinition]) -> list[str]:
    return [name for name in DISPLAY_FIELDS if any(f.slug == name for f in fields)]


def is_unchanged(snapshot: Snapshot, observed: Mapping[str, Any] | None) -> bool:
    """Same fingerprint, complete and error-free: writing it again would change nothing."""
    return (
        observed is not None
        and observed["source_fingerprint"] == snapshot.fingerprint
        and observed["source_completeness"] == "complete"
        and observed["last_error_code"] is None
    )


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
        if current is not None and is_unchanged(snapshot, current):
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
    changed = [s for s in snapshots.snapshots if not is_unchanged(s, observed.get(s.variant))]
    occurrences = sum(len(s.occurrences) for s in changed)
    size = sum(s.byte_length for s in changed)
    return occurrences > limits.max_occurrences or size > limits.max_index_bytes
