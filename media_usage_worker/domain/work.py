"""Records of the durable work table, as the repository returns them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from typing import TypeVar

from media_usage_worker.domain import validation as check
from media_usage_worker.domain.errors import InvalidArgument
from media_usage_worker.domain.vocabulary import RetryOutcome, WorkState

T = TypeVar("T")


@dataclass(frozen=True)
class Lease:
    """One claim on one work row at one version: every write of its holder is fenced on it."""

    collection_id: str
    content_id: str
    work_version: int
    lease_token: str


@dataclass(frozen=True)
class WorkRecord:
    """One ``_emdash_media_usage_work`` row; versions and epochs are ints."""

    collection_id: str
    collection_slug: str
    content_id: str
    change_epoch: int
    work_version: int
    state: WorkState
    attempt_count: int
    next_attempt_at: str
    lease_token: str | None
    lease_expires_at: str | None
    last_attempted_at: str | None
    last_error_code: str | None
    created_at: str
    updated_at: str

    @property
    def lease(self) -> Lease | None:
        """The lease this record holds (``None`` for a row that is not leased)."""
        if self.lease_token is None:
            return None
        return Lease(self.collection_id, self.content_id, self.work_version, self.lease_token)

    @property
    def due_at(self) -> str:
        """When the row becomes (or became) eligible: lease expiry for leased rows."""
        if self.state != WorkState.LEASED:
            return self.next_attempt_at
        if self.lease_expires_at is None:
            raise ValueError("Due leased media usage work must have a lease expiry.")
        return self.lease_expires_at


@dataclass(frozen=True)
class OperatorWorkItem:
    """What an operator may see of a work row: no lease token, version or epoch."""

    collection_id: str
    collection_slug: str
    content_id: str
    state: WorkState
    attempt_count: int
    next_attempt_at: str
    lease_expires_at: str | None
    last_attempted_at: str | None
    last_error_code: str | None
    updated_at: str

    @classmethod
    def from_record(cls, record: WorkRecord) -> OperatorWorkItem:
        return cls(**{f.name: getattr(record, f.name) for f in fields(cls)})


@dataclass(frozen=True)
class Page:
    items: list[OperatorWorkItem]
    next_cursor: str | None = None


@dataclass(frozen=True)
class OperatorRetryResult:
    outcome: RetryOutcome
    changed: bool = False
    work: OperatorWorkItem | None = None
    lease_expires_at: str | None = None


def due_order(record: WorkRecord) -> tuple[str, str, str, str]:
    """emdash's eligibility order: due time, then updated_at, collection id, content id."""
    return (record.due_at, record.updated_at, record.collection_id, record.content_id)


def operator_order(item: OperatorWorkItem) -> tuple[str, str]:
    """Sort key for the operator listing, which is newest first (use ``reverse=True``)."""
    return (item.updated_at, item.content_id)


# Items one batch message may carry: a claim of up to this many items of one collection, worked
# in reads of ``pipeline.batch.READ_CHUNK`` entries, so its memory does not grow with its size.
MAX_BATCH = 1000


@dataclass(frozen=True)
class Item:
    """One work item of a message: ids and the version it was sent for."""

    collection_id: str
    content_id: str
    work_version: int


def checked_items(raw: Sequence[Sequence[object]]) -> list[Item]:
    """Validate every item before any I/O (one bad item rejects the batch); duplicates count
    once. Raises ``InvalidArgument``."""
    if not 1 <= len(raw) <= MAX_BATCH:
        raise InvalidArgument(f"A batch holds 1 to {MAX_BATCH} items.")
    items: dict[Item, None] = {}
    for one in raw:
        if not isinstance(one, list | tuple) or len(one) != 3:
            raise InvalidArgument("A batch item is [collection_id, content_id, work_version].")
        collection_id, content_id = check.identity(one[0], one[1])
        items[Item(collection_id, content_id, check.work_version(one[2]))] = None
    return list(items)


def grouped(items: Iterable[T], key: Callable[[T], str]) -> list[list[T]]:
    """``items`` grouped by ``key`` (a collection id, a slug), groups in first-seen order and
    items in their order: what one claim, one read or one message may share."""
    groups: dict[str, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return list(groups.values())
