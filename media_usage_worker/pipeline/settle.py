"""How a batch's items end: the decisions of ``pipeline.batch``, apart from its I/O.

``entry_outcome`` classifies an entry after the batch's shared write; ``settle`` retries a failed
item with backoff or fails it for good, through the work table's two fenced transitions (the
repository's module, or a small fake in unit tests).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from media_usage_worker.domain import policy
from media_usage_worker.domain.vocabulary import ErrorCode, Outcome
from media_usage_worker.domain.work import Item, Lease, WorkRecord

if TYPE_CHECKING:
    from media_usage_worker.repository.base.db import Bind


@dataclass(frozen=True)
class ProcessResult:
    outcome: Outcome
    collection_id: str
    content_id: str
    work_version: int
    error_code: ErrorCode | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


class EntryOutcome(StrEnum):
    """Where an entry of a batch stands after the batch's shared write."""

    REFRESH_FAILED = "refresh_failed"  # it had no write: its refresh's code settles it
    COMPLETED = "completed"  # written, and its work row completed under the lease
    SUPERSEDED = "superseded"  # written, but a newer version (or holder) fenced the completion
    ALONE = "alone"  # its compare-and-set lost (or the shared write failed): refresh it alone


def entry_outcome(
    content_id: str,
    failed: Mapping[str, object],
    written: Collection[str],
    completed: Collection[str],
) -> EntryOutcome:
    if content_id in failed:
        return EntryOutcome.REFRESH_FAILED
    if content_id in written:
        return EntryOutcome.COMPLETED if content_id in completed else EntryOutcome.SUPERSEDED
    return EntryOutcome.ALONE


class Transitions(Protocol):
    """The fenced transitions ``settle`` needs, each ``True`` only while the lease held: the
    module ``repository.work_queue.work_processing``, or a fake."""

    def fail_lease(self, bind: Bind, lease: Lease, /, *, error_code: str) -> bool: ...

    def retry_lease(
        self, bind: Bind, lease: Lease, /, *, retry_delay_seconds: int, error_code: str
    ) -> bool: ...


@dataclass(frozen=True)
class Settled:
    result: ProcessResult
    # Seconds until the retry; ``None`` for a failure for good, or when nothing changed.
    retry_in: int | None = None

    @property
    def changed(self) -> bool:
        """The item was retried or failed (and is to be reported); not superseded."""
        return self.result.outcome in (Outcome.RETRY, Outcome.FAILED)


def settle(
    work: Transitions,
    bind: Bind,
    record: WorkRecord,
    code: ErrorCode,
    rand: Callable[[], float],
    on_failed: Callable[[WorkRecord, ErrorCode], object],
) -> Settled:
    """Retry the item with backoff, or fail it for good (then ``on_failed`` notes it on the
    coverage row). A lease lost meanwhile changes nothing: the item is ``superseded``."""
    lease = claimed_lease(record)
    if policy.is_terminal(code, record.attempt_count):
        if not work.fail_lease(bind, lease, error_code=code):
            return Settled(result(record, Outcome.SUPERSEDED, code))
        on_failed(record, code)
        return Settled(result(record, Outcome.FAILED, code))
    delay = policy.retry_delay_seconds(record.attempt_count, rand)
    if work.retry_lease(bind, lease, retry_delay_seconds=delay, error_code=code):
        return Settled(result(record, Outcome.RETRY, code), delay)
    return Settled(result(record, Outcome.SUPERSEDED, code))


def claimed_lease(record: WorkRecord) -> Lease:
    lease = record.lease
    assert lease is not None  # a claimed record holds its lease
    return lease


def result(record: WorkRecord, outcome: Outcome, code: ErrorCode | None = None) -> ProcessResult:
    return ProcessResult(
        outcome, record.collection_id, record.content_id, record.work_version, code
    )


def lost(item: Item) -> ProcessResult:
    """An item this batch could not claim: another holder has it, or it moved on."""
    return ProcessResult(Outcome.CLAIM_LOST, item.collection_id, item.content_id, item.work_version)
