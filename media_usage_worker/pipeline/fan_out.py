"""The tick: read due work page by page, hand each page to the sender, and report."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from media_usage_worker.domain.timestamps import seconds_between
from media_usage_worker.domain.validation import split_usable
from media_usage_worker.domain.vocabulary import DUE_STATES, ErrorCode, Outcome
from media_usage_worker.domain.work import MAX_BATCH, WorkRecord
from media_usage_worker.repository.base.db import Bind, read_transaction
from media_usage_worker.repository.lifecycle.activation import is_activation_active
from media_usage_worker.repository.reconciling import coverage
from media_usage_worker.repository.work_queue import pace
from media_usage_worker.repository.work_queue import work_processing as work

if TYPE_CHECKING:
    from sqlalchemy import Engine

DUE_PAGE = 100


@dataclass(frozen=True)
class FanOut:
    seen: int  # due items read
    sent: int  # messages sent (items already in flight are not sent again)
    unusable: int  # items settled without a message (unusable content ids)


@dataclass(frozen=True)
class TickReport:
    """What one tick did: the task's result and its Flower event."""

    active: bool  # capture is active (else nothing is read or sent)
    due_seen: int = 0
    dispatched: int = 0
    unusable_settled: int = 0
    queued_before: int | None = None  # messages waiting when the tick began (None: unknown)
    budget_exhausted: bool = False  # the tick read its whole budget: more may be due
    coverage_restored: tuple[str, ...] = ()  # slugs whose lost coverage note was restored
    failures_noted: tuple[str, ...] = ()  # slugs made partial after a lost failure note
    oldest_due_age_seconds: float = 0.0
    duration_ms: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        if not self.active:
            return {"active": False, "dispatched": 0}
        shown = asdict(self)
        shown["coverage_restored"] = list(self.coverage_restored)
        shown["failures_noted"] = list(self.failures_noted)
        return shown


def run_tick(
    engine: Engine,
    *,
    queued: Callable[[], int | None],
    budget: int,
    max_queued: int,
    batch_size: int,
    send: Callable[[list[WorkRecord]], Sequence[object]],
) -> TickReport:
    """One tick: while capture is active, read due work up to the budget the queue's depth
    allows (``due_read_budget``) and ``send`` it, then restore coverage a killed worker left
    stale (nothing else runs for a collection whose work is all done), mark ``partial`` where
    a failure's note was lost, and sample the pace of writes and drain for ``status``."""
    started = time.monotonic()
    with read_transaction(engine) as conn:
        if not is_activation_active(conn):
            return TickReport(active=False)
    queued_before = queued()
    read_budget = due_read_budget(
        queued_before, budget=budget, max_queued=max_queued, batch_size=batch_size
    )
    fanned = fan_out_due_work(engine, read_budget, send)
    now, oldest = work.oldest_due(engine)
    restored = coverage.restore_settled_coverage(engine)
    failures_noted = coverage.note_lost_failures(engine)
    pace.record_sample(engine)
    return TickReport(
        active=True,
        due_seen=fanned.seen,
        dispatched=fanned.sent,
        unusable_settled=fanned.unusable,
        queued_before=queued_before,
        budget_exhausted=read_budget > 0 and fanned.seen >= read_budget,
        coverage_restored=tuple(restored),
        failures_noted=tuple(failures_noted),
        oldest_due_age_seconds=round(seconds_between(oldest, now), 3) if oldest else 0.0,
        duration_ms=round((time.monotonic() - started) * 1000, 1),
    )


def due_read_budget(
    queued_messages: int | None, *, budget: int, max_queued: int, batch_size: int
) -> int:
    """How many due items a tick reads, given the messages still waiting in the queue.

    Items already sent but not yet claimed are still due, and come first in due order: a tick
    that reads while the queue is well stocked re-reads them only to find them in flight. So
    while the waiting messages may hold half the budget or more (each counted as a full batch)
    the tick reads nothing, and otherwise it reads up to the budget: a backlog is topped up in
    steps of about half the budget, each in-flight item re-read about once. The queue never
    holds more than ``max_queued`` messages. With no depth reading (``None``), the budget.
    """
    if queued_messages is None:
        return budget
    if queued_messages * batch_size * 2 >= budget:
        return 0
    return max(0, min(budget, (max_queued - queued_messages) * batch_size))


def fan_out_due_work(
    bind: Bind,
    budget: int,
    send: Callable[[list[WorkRecord]], Sequence[object]],
) -> FanOut:
    """Read up to ``budget`` due items page by page and hand them to ``send``, up to
    ``MAX_BATCH`` at a time (so a backlog's messages can be as large as the batch size allows).

    Expired leases first (their holders died), then retries, then fresh work. An item whose
    content id no message may carry is settled here instead of being sent.
    """
    seen = sent = unusable = 0
    ready: list[WorkRecord] = []
    for state in DUE_STATES:
        after = None
        while seen < budget:
            limit = min(DUE_PAGE, budget - seen)
            page = work.find_due_page(bind, state, limit, after)
            seen += len(page)
            usable, unusable_items = split_usable(page, lambda item: item.content_id)
            for item in unusable_items:
                settle_unusable_item(bind, item)
            unusable += len(unusable_items)
            ready += usable
            if len(ready) >= MAX_BATCH:
                sent += len(send(ready))
                ready = []
            if len(page) < limit:
                break
            after = page[-1]
    if ready:
        sent += len(send(ready))
    return FanOut(seen, sent, unusable)


def settle_unusable_item(bind: Bind, record: WorkRecord) -> Outcome:
    """Fail (or drop, if its entry is gone) an item whose content id cannot be used.

    The tick calls this instead of sending a message that every worker would refuse: the item
    ends ``failed`` with ``MEDIA_USAGE_UNUSABLE_CONTENT_ID`` and coverage says ``partial``.
    """
    outcome = work.settle_unusable_work(bind, record, ErrorCode.UNUSABLE_CONTENT_ID)
    if outcome == Outcome.FAILED:
        coverage.record_incremental_failure(
            bind, record.collection_id, record.collection_slug, record.content_id,
            record.work_version, ErrorCode.UNUSABLE_CONTENT_ID,
        )  # fmt: skip
    return outcome
