"""Collection deletion rules (emdash 0.34.0 facts §14): phase order, retries, batch sizes."""

from __future__ import annotations

from media_usage_worker.domain.vocabulary import DeletionPhase

FRONT_PHASES = (DeletionPhase.FENCE, DeletionPhase.REGISTRY, DeletionPhase.TABLE)
BACK_PHASES = (
    DeletionPhase.WORK,
    DeletionPhase.SOURCES,
    DeletionPhase.STATUS,
    DeletionPhase.FINALIZE,
)
LEASE_SECONDS = 300
MAX_ATTEMPTS = 5
# Rows one batch of a back phase deletes (work rows, or one source's occurrences).
BATCH_SIZE = 50
RETRY_BASE_SECONDS = 30
RETRY_MAX_SECONDS = 900


def next_phase(phase: DeletionPhase) -> DeletionPhase | None:
    """The phase after ``phase``; ``None`` after ``finalize``."""
    order = list(DeletionPhase)
    position = order.index(phase)
    return order[position + 1] if position + 1 < len(order) else None


def is_front(phase: DeletionPhase) -> bool:
    return phase in FRONT_PHASES


def retry_delay_seconds(attempt_count: int) -> int:
    """``min(900, 30 · 2^attempt)``: no jitter, as emdash (one deleter per collection)."""
    return min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** min(attempt_count, 16))


def is_terminal(attempt_count: int) -> bool:
    """This failure is the fifth attempt: the deletion fails for good (an operator retries)."""
    return attempt_count + 1 >= MAX_ATTEMPTS
