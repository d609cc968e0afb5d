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


class RestoreRefusal(StrEnum):
    """Why an id was not restored."""

    NOT_RETIRED = "not_retired"
    IN_LIBRARY = "in_library"


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
    """The file ``storage_key`` names under ``directory``, or ``None`` when it would be
    anywhere else (an absolute path, ``..``, a symlink out, NUL): such a key is never
    deleted. ``directory`` is resolved already."""
    if not isinstance(storage_key, str) or not storage_key or "\x00" in storage_key:
        return None
    candidate = Path(storage_key)
    if candidate.is_absolute() or ".." in candidate.parts:
        return None
    resolved = (directory / candidate).resolve()
    return resolved if resolved.is_relative_to(directory) and resolved != directory else None
