"""Runtime settings of the tasks, read from the environment each time they are needed.

Tasks call these at run time (never at import) so one process can be pointed at another
database or given other limits by changing its environment, as the test suite does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import TypeVar

from media_usage_worker.domain import deletion, policy
from media_usage_worker.domain.errors import InvalidArgument, InvalidSetting
from media_usage_worker.domain.policy import Limits, positive_setting
from media_usage_worker.domain.work import MAX_BATCH
from media_usage_worker.repository.base.db import parse_database_url

T = TypeVar("T")

DEFAULT_DATABASE_URL = policy.DEFAULT_DATABASE_URL
DEFAULT_BROKER_URL = "redis://localhost:6379/0"
DEFAULT_QUEUE = "media_usage"
# The hard limit bounds how long heartbeats may extend a lease; the soft limit fires first.
TASK_TIME_LIMIT_SECONDS = 300
TASK_SOFT_TIME_LIMIT_SECONDS = 270
# Broker redelivery must wait longer than any lease can live (lease + hard limit).
VISIBILITY_TIMEOUT_SECONDS = 3600
MAX_TASK_TIME_LIMIT_SECONDS = 3000
MAX_MEMORY_PER_CHILD_KIB = 512 * 1024


def time_limits() -> tuple[int, int]:
    """``(hard, soft)`` seconds per task: a slow item is interrupted at the soft limit and
    retried (``MEDIA_USAGE_TIME_LIMIT``); the hard limit kills the pool child."""
    hard = positive_int("MEDIA_USAGE_TASK_TIME_LIMIT", TASK_TIME_LIMIT_SECONDS)
    soft = positive_int("MEDIA_USAGE_TASK_SOFT_TIME_LIMIT", min(TASK_SOFT_TIME_LIMIT_SECONDS, hard))
    if hard > MAX_TASK_TIME_LIMIT_SECONDS:
        raise InvalidSetting(
            f"MEDIA_USAGE_TASK_TIME_LIMIT must be at most {MAX_TASK_TIME_LIMIT_SECONDS} s (the "
            f"broker redelivers unacknowledged messages after an hour), not {hard}."
        )
    if soft >= hard:
        raise InvalidSetting(
            f"MEDIA_USAGE_TASK_SOFT_TIME_LIMIT ({soft} s) must be below "
            f"MEDIA_USAGE_TASK_TIME_LIMIT ({hard} s)."
        )
    return hard, soft


# Queue names every broker takes as they are: no spaces, no wildcards.
_QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}")


def queue_name() -> str:
    """The queue every task of this project is routed to (``MEDIA_USAGE_QUEUE``)."""
    name = os.environ.get("MEDIA_USAGE_QUEUE") or DEFAULT_QUEUE
    if not _QUEUE_NAME.fullmatch(name):
        raise InvalidSetting(
            "MEDIA_USAGE_QUEUE must be 1 to 200 letters, digits, '_', '.', ':' or '-', "
            f"starting with a letter or digit, not {name[:80]!r}."
        )
    return name


def broker_url() -> str:
    """The broker (``MEDIA_USAGE_BROKER_URL``), as given: ``check_all`` refuses a malformed one."""
    return os.environ.get("MEDIA_USAGE_BROKER_URL") or DEFAULT_BROKER_URL


def broker_folder() -> str | None:
    """Where the server-less ``filesystem://`` broker keeps its files (the embedded demo)."""
    return os.environ.get("MEDIA_USAGE_BROKER_FOLDER") or None


def _broker_setting() -> None:
    url = broker_url()
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*://\S*", url):
        raise InvalidSetting(
            "MEDIA_USAGE_BROKER_URL must be a broker URL such as redis://host:6379/0, "
            f"not {url[:80]!r}."
        )
    if url.startswith("filesystem://") and broker_folder() is None:
        raise InvalidSetting(
            "MEDIA_USAGE_BROKER_URL filesystem:// needs MEDIA_USAGE_BROKER_FOLDER."
        )


def database_url() -> str:
    return os.environ.get("MEDIA_USAGE_DATABASE_URL") or DEFAULT_DATABASE_URL


def positive_int(name: str, default: int) -> int:
    return positive_setting(os.environ, name, default)


def lease_seconds() -> int:
    """The claim's lease (60 s, as emdash); renewed every third of it while the item runs."""
    return positive_int("MEDIA_USAGE_LEASE_SECONDS", policy.LEASE_SECONDS)


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
    return positive_int("MEDIA_USAGE_MAX_MEMORY_PER_CHILD_KIB", MAX_MEMORY_PER_CHILD_KIB)


def dispatch_ttl_seconds() -> int:
    """How long a dispatched message lives (and suppresses re-dispatch of the same item)."""
    return positive_int("MEDIA_USAGE_DISPATCH_TTL", lease_seconds())


def limits() -> Limits:
    """Per-item admission limits (``MEDIA_USAGE_MAX_OCCURRENCES``, ``..._INDEX_BYTES``,
    ``..._ENTRY_CHARS``)."""
    return Limits.from_env(os.environ)


def batch_size() -> int:
    """Items per ``media_usage.process_batch`` message (1 to ``MAX_BATCH``)."""
    # 300: a backfill on two cores ran 30 % faster than with 50 (fewer claims, messages and
    # statements per entry), while a single write sent during a backlog was still indexed
    # within 212 ms at p99 (docs/benchmarks.md, section 7).
    size = positive_int("MEDIA_USAGE_BATCH_SIZE", 300)
    if size > MAX_BATCH:
        raise InvalidSetting(f"MEDIA_USAGE_BATCH_SIZE must be from 1 to {MAX_BATCH}, not {size}.")
    return size


def deletion_lease_seconds() -> int:
    """A collection deletion's lease (300 s, as emdash): a killed worker's deletion resumes
    once it expires."""
    return positive_int("MEDIA_USAGE_DELETION_LEASE_SECONDS", deletion.DELETION_LEASE_SECONDS)


def reconcile_defer_seconds() -> int:
    """How long reconciliation waits after a collection's last write before it pages on."""
    return positive_int("MEDIA_USAGE_RECONCILE_DEFER_SECONDS", 5)


def batch_threshold() -> int:
    """A tick page with more due items than this is sent as batches, a smaller one item by item
    (the fast path): a backfill runs at batch speed while a single write is still indexed at
    once. Default: twice a two-process worker's concurrency."""
    return positive_int("MEDIA_USAGE_BATCH_THRESHOLD", 4)


LOG_FORMATS = ("text", "json")


def log_format() -> str:
    """How a worker or beat writes its log: Celery's text lines, or one JSON object per line
    (``MEDIA_USAGE_LOG_FORMAT=json``) for log pipelines."""
    value = (os.environ.get("MEDIA_USAGE_LOG_FORMAT") or "text").strip().lower()
    if value not in LOG_FORMATS:
        raise InvalidSetting(
            f"MEDIA_USAGE_LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}, not {value[:80]!r}."
        )
    return value


def _database_url_setting() -> None:
    try:
        parse_database_url(database_url())
    except InvalidArgument as exc:
        raise InvalidSetting(f"MEDIA_USAGE_DATABASE_URL: {exc}") from None


# Every setting a worker or beat reads, each read once by ``check_all``.
_EVERY_SETTING: tuple[Callable[[], object], ...] = (
    _database_url_setting, _broker_setting, queue_name, time_limits, lease_seconds, tick_seconds,
    reconcile_seconds, reconcile_defer_seconds, deletion_lease_seconds, tick_budget, max_queued,
    max_memory_per_child_kib, dispatch_ttl_seconds, batch_size, batch_threshold, limits,
    log_format,
)  # fmt: skip


def check_all() -> None:
    """Read every setting; ``InvalidSetting`` names each bad one (on one line) and what is
    allowed. Workers and beats run it at start-up (``tasks.app``) and ``binding.bind`` runs it
    first, so a bad value stops them instead of surfacing in the first task that reads it."""
    problems = []
    for read in _EVERY_SETTING:
        try:
            read()
        except InvalidSetting as exc:
            problems.append(str(exc))
    if problems:
        raise InvalidSetting(" ".join(dict.fromkeys(problems)))


def or_default(read: Callable[[], T], default: T) -> T:
    """``read()``, or ``default`` when its setting is bad: for the values Celery needs when the
    app is imported. A bad value is reported, and stops a worker or beat, by ``check_all``."""
    try:
        return read()
    except InvalidSetting:
        return default
