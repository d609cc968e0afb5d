"""Process one work item: the batch path (``pipeline.batch``) with a batch of one.

``process_work_item`` runs one item as the Celery task ``media_usage.process_work`` does (a
batch of one); every step after the claim is fenced by the lease (token and work version), so a
stale message, a duplicate, or a worker whose lease expired cannot change anything
(docs/design.md §3).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from media_usage_worker.domain import policy
from media_usage_worker.domain.work import checked_items
from media_usage_worker.pipeline.batch import BatchRun, Heartbeat
from media_usage_worker.pipeline.settle import ProcessResult

if TYPE_CHECKING:
    from sqlalchemy import Engine

__all__ = ["Heartbeat", "ProcessResult", "process_work_item"]


def process_work_item(
    engine: Engine,
    *,
    collection_id: str,
    content_id: str,
    work_version: int | str,
    limits: policy.Limits | None = None,
    lease_seconds: int = policy.LEASE_SECONDS,
    rand: Callable[[], float] = random.random,
    heartbeat: Heartbeat | None = None,
    interrupts: tuple[type[BaseException], ...] = (),
    before_write: Callable[[], None] | None = None,
    on_drained: Callable[[], object] | None = None,
) -> ProcessResult:
    """Run one item. Invalid arguments raise ``InvalidArgument`` before anything is written.

    With ``heartbeat`` the lease is renewed while the item runs, so a long item is not taken
    over while its worker is alive. An exception of the ``interrupts`` types (the worker's soft
    time limit) discards the connection, which may be half-way through a statement, and retries
    the item with ``MEDIA_USAGE_TIME_LIMIT`` (failed after the attempt limit), so an item that
    is always too slow cannot loop for ever.
    """
    (item,) = checked_items([(collection_id, content_id, work_version)])
    run = BatchRun(
        engine,
        limits or policy.Limits(),
        lease_seconds=lease_seconds,
        rand=rand,
        heartbeat=heartbeat,
        interrupts=interrupts,
        before_write=before_write,
        on_drained=on_drained,
    )
    (result,) = run.run([item])
    return result
