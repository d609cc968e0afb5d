"""Processing policy of one work item (docs/design.md §3): error codes, retries, limits."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from media_usage_worker.domain.errors import InvalidSetting
from media_usage_worker.domain.vocabulary import ErrorCode, RefreshCode

# How long a claim holds a work item or a reconciliation before another worker may take it.
LEASE_SECONDS = 60
# The database the CLI, the workers and beat use when MEDIA_USAGE_DATABASE_URL is not set.
DEFAULT_DATABASE_URL = "sqlite:///media_usage.db"


@dataclass(frozen=True)
class RetryPolicy:
    """When a failed attempt is tried again (exponential back-off, capped) and when it is the
    last: ``min(max, exp + floor(exp · jitter · r))`` with ``exp = min(max, base · 2^attempts)``."""

    max_attempts: int = 5
    base_seconds: int = 30
    max_seconds: int = 900
    jitter_ratio: float = 0.0

    def delay_seconds(self, attempt_count: int, rand: Callable[[], float] = random.random) -> int:
        exponential: int = min(self.max_seconds, self.base_seconds * 2 ** min(attempt_count, 16))
        jitter = math.floor(exponential * self.jitter_ratio * rand())
        return min(self.max_seconds, exponential + jitter)

    def is_last(self, attempt_count: int) -> bool:
        """This failure is the last attempt (the fifth, by default)."""
        return attempt_count + 1 >= self.max_attempts


# Work items and reconciliations: jittered, so failures of one burst do not retry in step.
WORK_RETRIES = RetryPolicy(jitter_ratio=0.25)

# Refresh results → the stable code stored on the work row.
WORK_CODE_BY_REFRESH_CODE: Mapping[RefreshCode, ErrorCode] = {
    RefreshCode.DRAFT_REVISION_NOT_FOUND: ErrorCode.SNAPSHOT_FAILED,
    RefreshCode.DRAFT_REVISION_MISMATCH: ErrorCode.SNAPSHOT_FAILED,
    RefreshCode.DRAFT_REVISION_INVALID: ErrorCode.SNAPSHOT_FAILED,
    RefreshCode.GENERATION_CONFLICT: ErrorCode.GENERATION_CONFLICT,
    RefreshCode.RESOURCE_LIMIT: ErrorCode.RESOURCE_LIMIT,
    RefreshCode.UNREADABLE_VALUE: ErrorCode.UNREADABLE_VALUE,
}

# Codes whose cause is the data itself: another attempt reads the same data and fails alike.
_FINAL_CODES = frozenset({ErrorCode.RESOURCE_LIMIT, ErrorCode.UNREADABLE_VALUE})


def work_error_code(refresh_code: RefreshCode) -> ErrorCode:
    return WORK_CODE_BY_REFRESH_CODE.get(refresh_code, ErrorCode.PROCESSING_FAILED)


def retry_delay_seconds(attempt_count: int, rand: Callable[[], float] = random.random) -> int:
    """The delay before a work item's next attempt (``WORK_RETRIES``)."""
    return WORK_RETRIES.delay_seconds(attempt_count, rand)


def is_terminal(work_code: ErrorCode, attempt_count: int) -> bool:
    """Fail for good on a resource limit or an unreadable value, or when this failure is the
    last attempt."""
    return work_code in _FINAL_CODES or WORK_RETRIES.is_last(attempt_count)


@dataclass(frozen=True)
class Limits:
    """Per-item admission limits. emdash 0.34.0's 12 occurrences / 512 KiB break real pages."""

    max_occurrences: int = 50_000
    max_index_bytes: int = 16 * 1024 * 1024
    # Text of the media-bearing fields (live columns plus draft), checked before any is parsed:
    # parsed JSON takes ten to twenty times its text in memory.
    max_entry_chars: int = 16 * 1024 * 1024

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Limits:
        """The limits an environment sets (``MEDIA_USAGE_MAX_*``); the caller reads it."""
        return cls(
            max_occurrences=positive_setting(
                env, "MEDIA_USAGE_MAX_OCCURRENCES", cls.max_occurrences
            ),
            max_index_bytes=positive_setting(
                env, "MEDIA_USAGE_MAX_INDEX_BYTES", cls.max_index_bytes
            ),
            max_entry_chars=positive_setting(
                env, "MEDIA_USAGE_MAX_ENTRY_CHARS", cls.max_entry_chars
            ),
        )


def positive_setting(env: Mapping[str, str], name: str, default: int) -> int:
    """A whole-number setting from the environment; blank means ``default``."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidSetting(f"{name} must be a positive whole number, not {raw!r}.") from None
    if value < 1:
        raise InvalidSetting(f"{name} must be a positive whole number, not {raw!r}.")
    return value
