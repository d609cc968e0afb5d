"""Clean-up of unused media (docs/design.md §13): what an unused listing, a retirement and a
restore answer, as pure data. ``repository.cleanup`` holds the statements and the fence."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from media_usage_worker.domain import validation as check
from media_usage_worker.domain.errors import InvalidArgument

# Ids one retire or restore call takes; each transaction (one fence) holds this many at most,
# so a writer waits for one short transaction, never for a whole clean-up.
MAX_IDS = 1000
FENCE_BATCH = 100
MAX_MIME_PREFIX = 100
MAX_DAYS = 36_500


class RetireRefusal(StrEnum):
    """Why an id was not retired."""

    USED = "used"
    NOT_KNOWN_YET = "not_known_yet"
    NOT_IN_LIBRARY = "not_in_library"
    ALREADY_RETIRED = "already_retired"
    # another library or quarantined item names the same storage key: the file is its too
    SHARED_FILE = "shared_file"


class RestoreRefusal(StrEnum):
    """Why an id was not restored."""

    NOT_RETIRED = "not_retired"
    IN_LIBRARY = "in_library"
    PURGED = "purged"  # removed for good by a purge: nothing left to restore


class PurgeRefusal(StrEnum):
    """Why a quarantined item was kept by a purge (it stays in the quarantine)."""

    NOT_KNOWN_YET = "not_known_yet"  # coverage not complete, or a write waits to be indexed
    USED = "used"
    SHARED_FILE = "shared_file"  # another library or quarantined item names its storage key
    MENTIONED = "mentioned"  # the final sweep found its id or key in the site's data
    NOT_RETIRED = "not_retired"  # restored (or purged) since it was listed
    TOO_RECENT = "too_recent"


@dataclass(frozen=True)
class UnusedItem:
    id: str
    filename: str
    mime_type: str
    size: int | None
    storage_key: str
    created_at: str | None


@dataclass(frozen=True)
class UnusedPage:
    """A page of library items no source uses; ``known`` is False (and the page empty) while
    coverage is not ``complete``, with the coverage that says why."""

    known: bool
    coverage: str
    items: list[UnusedItem]
    next_cursor: str | None
    total_count: int | None
    total_bytes: int | None


@dataclass(frozen=True)
class RetireResult:
    retired: list[str] = field(default_factory=list)
    refused: dict[str, RetireRefusal] = field(default_factory=dict)


@dataclass(frozen=True)
class RestoreResult:
    restored: list[str] = field(default_factory=list)
    refused: dict[str, RestoreRefusal] = field(default_factory=dict)


@dataclass(frozen=True)
class UnusedFilter:
    """Which unused items a listing or ``retire --all-unused`` takes."""

    older_than_days: int | None = None
    mime_prefix: str | None = None
    # Items used only by trashed entries (emptying the trash would free them), instead.
    trashed_only: bool = False

    def validated(self) -> UnusedFilter:
        days = self.older_than_days
        if days is not None and (
            not isinstance(days, int) or isinstance(days, bool) or not 0 <= days <= MAX_DAYS
        ):
            raise InvalidArgument(f"older_than is a whole number of days, 0 to {MAX_DAYS}.")
        prefix = self.mime_prefix
        if prefix is not None and (
            not isinstance(prefix, str)
            or not 0 < len(prefix) <= MAX_MIME_PREFIX
            or not prefix.isascii()
            or not prefix.isprintable()
        ):
            raise InvalidArgument(
                f"mime_prefix is 1 to {MAX_MIME_PREFIX} printable ASCII characters (image/)."
            )
        if not isinstance(self.trashed_only, bool):
            raise InvalidArgument("trashed_only is true or false.")
        return self


def checked_ids(ids: object) -> list[str]:
    """1 to ``MAX_IDS`` media ids, each a usable id; repeated ids count once."""
    if not isinstance(ids, list | tuple) or not 1 <= len(ids) <= MAX_IDS:
        raise InvalidArgument(f"Give 1 to {MAX_IDS} media ids.")
    return list(dict.fromkeys(check.named_identifier("media id", i) for i in ids))


def batches(ids: Sequence[str], size: int = FENCE_BATCH) -> list[list[str]]:
    return [list(ids[start : start + size]) for start in range(0, len(ids), size)]


def file_under(directory: Path, storage_key: object) -> Path | None:
    """The path ``storage_key`` names under ``directory``, or ``None`` when it would be
    anywhere else (an absolute path, ``..``, a folder that is a symlink out, NUL): such a key
    is never deleted. ``directory`` is resolved already. The last part is not followed: a
    key that is a symlink names the link itself, never its target."""
    if not isinstance(storage_key, str) or not storage_key or "\x00" in storage_key:
        return None
    candidate = Path(storage_key)
    if candidate.is_absolute() or ".." in candidate.parts or not candidate.parts:
        return None
    folder = (directory / candidate).parent.resolve()
    if not folder.is_relative_to(directory):
        return None
    return folder / candidate.name


MAX_REASON = 500


def checked_reason(reason: object) -> str:
    """A retirement's reason: 1 to ``MAX_REASON`` characters of text."""
    if not isinstance(reason, str) or not 0 < len(reason) <= MAX_REASON or "\x00" in reason:
        raise InvalidArgument(f"A reason is 1 to {MAX_REASON} characters of text.")
    return reason


def checked_actor(actor: object) -> str:
    """Who acts, as the audit records it: 1 to 200 characters of text."""
    if not isinstance(actor, str) or not 0 < len(actor) <= 200 or "\x00" in actor:
        raise InvalidArgument("An actor is 1 to 200 characters of text (who acts, for the audit).")
    return actor
