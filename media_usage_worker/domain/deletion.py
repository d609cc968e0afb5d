"""Collection deletion rules (as emdash 0.34 orders them): phase order, lease, retries, batches."""

from __future__ import annotations

from media_usage_worker.domain.policy import RetryPolicy
from media_usage_worker.domain.vocabulary import DeletionPhase

FRONT_PHASES = (DeletionPhase.FENCE, DeletionPhase.REGISTRY, DeletionPhase.TABLE)
# A deletion step may drop a large table: its lease is longer than a work item's.
DELETION_LEASE_SECONDS = 300
LEASE_SECONDS = DELETION_LEASE_SECONDS  # the earlier name, still importable
# Rows one batch of a back phase deletes (work rows, or one source's occurrences).
BATCH_SIZE = 50
# No jitter, as emdash: one deleter per collection, nothing to spread.
RETRIES = RetryPolicy()


def is_front(phase: DeletionPhase) -> bool:
    return phase in FRONT_PHASES


def retry_delay_seconds(attempt_count: int) -> int:
    """``min(900, 30 · 2^attempt)``, the delay before the deletion's next attempt."""
    return RETRIES.delay_seconds(attempt_count)


def is_terminal(attempt_count: int) -> bool:
    """This failure is the fifth attempt: the deletion fails for good (an operator retries)."""
    return RETRIES.is_last(attempt_count)
