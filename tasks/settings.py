"""Runtime settings of the tasks, read from the environment each time they are needed.

Tasks call these at run time (never at import) so one process can be pointed at another
database or given other limits by changing its environment, as the test suite does.
"""

from __future__ import annotations

import os

from media_usage_worker.domain.errors import InvalidArgument
from media_usage_worker.domain.policy import positive_setting
from media_usage_worker.domain.work import MAX_BATCH

DEFAULT_DATABASE_URL = "sqlite:///media_usage.db"
DEFAULT_QUEUE = "media_usage"
LEASE_SECONDS = 60
# The hard limit bounds how long heartbeats may extend a lease; the soft limit fires first.
TASK_TIME_LIMIT_SECONDS = 300
TASK_SOFT_TIME_LIMIT_SECONDS = 270
# Broker redelivery must wait longer than any lease can live (lease + hard limit).
VISIBILITY_TIMEOUT_SECONDS = 3600
MAX_TASK_TIME_LIMIT_SECONDS = 3000


def time_limits() -> tuple[int, int]:
    """``(hard, soft)`` seconds per task: a slow item is interrupted at the soft limit and
    retried (``MEDIA_USAGE_TIME_LIMIT``); the hard limit kills the pool child."""
    hard = positive_int("MEDIA_USAGE_TASK_TIME_LIMIT", TASK_TIME_LIMIT_SECONDS)
    soft = positive_int("MEDIA_USAGE_TASK_SOFT_TIME_LIMIT", min(TASK_SOFT_TIME_LIMIT_SECONDS, hard))
    if hard > MAX_TASK_TIME_LIMIT_SECONDS:
        raise InvalidArgument(
            f"MEDIA_USAGE_TASK_TIME_LIMIT must be at most {MAX_TASK_TIME_LIMIT_SECONDS} s (the "
            f"broker redelivers unacknowledged messages after an hour), not {hard}."
        )
    if soft >= hard:
        raise InvalidArgument(
            f"MEDIA_USAGE_TASK_SOFT_TIME_LIMIT ({soft} s) must be below "
            f"MEDIA_USAGE_TASK_TIME_LIMIT ({hard} s)."
        )
    return hard, soft


def queue_name() -> str:
    """The queue every task of this project is routed to (``MEDIA_USAGE_QUEUE``)."""
    return os.environ.get("MEDIA_USAGE_QUEUE") or DEFAULT_QUEUE


def database_url() -> str:
    return os.environ.get("MEDIA_USAGE_DATABASE_URL") or DEFAULT_DATABASE_URL


def positive_int(name: str, default: int) -> int:
    return positive_setting(os.environ, name, default)


def lease_seconds() -> int:
    """The claim's lease (60 s, as emdash); renewed every third of it while the item runs."""
    return positive_int("MEDIA_USAGE_LEASE_SECONDS", LEASE_SECONDS)


def tick_seconds() -> int:
    return positive_int("MEDIA_USAGE_TICK_SECONDS", 5)


def reconcile_seconds() -> int:
    return positive_int("MEDIA_USAGE_RECONCILE_SECONDS", 10)


def tick_budget() -> int:
    """Items one tick may dispatch: enough to keep a backlog of thousands moving per tick."""
    return positive_int("MEDIA_USAGE_TICK_BUDGET", 5000)


def max_queued() -> int:
    """Messages the tick keeps waiting in the queue at most.

    Sending more than the workers drain before the message TTL only makes messages expire and be
    sent again; the rest of a backlog stays in the work table, which costs nothing.
    """
    return positive_int("MEDIA_USAGE_MAX_QUEUED", 1000)


def max_memory_per_child_kib() -> int:
    """A pool child is replaced after a task that leaves it above this resident size (KiB).

    One item peaks at about 150 MB over a child's baseline under the default limits
    (``docs/reliability.md``); 512 MiB leaves room for that and returns what a large entry
    left behind instead of keeping it for the child's lifetime.
    """
    return positive_int("MEDIA_USAGE_MAX_MEMORY_PER_CHILD_KIB", 512 * 1024)


def dispatch_ttl_seconds() -> int:
    """How long a dispatched message lives (and suppresses re-dispatch of the same item)."""
    return positive_int("MEDIA_USAGE_DISPATCH_TTL", lease_seconds())


def batch_size() -> int:
    """Items per ``media_usage.process_batch`` message (1 to 100)."""
    return min(positive_int("MEDIA_USAGE_BATCH_SIZE", 50), MAX_BATCH)


def batch_threshold() -> int:
    """A tick page with more due items than this is sent as batches, a smaller one item by item
    (the fast path): a backfill runs at batch speed while a single write is still indexed at
    once. Default: twice a two-process worker's concurrency."""
    return positive_int("MEDIA_USAGE_BATCH_THRESHOLD", 4)
