"""Argument checks of the work repository, as emdash makes them; pure and raised before I/O.

Everything reaching the repository may come from a Celery message, the CLI or a cursor, so
types are checked as strictly as values: ``True`` is not a version and ``1.0`` is not a limit.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TypeGuard, TypeVar

from media_usage_worker.domain.errors import InvalidArgument
from media_usage_worker.domain.vocabulary import ReconciliationPhase, WorkState

MAX_PORTABLE_DURATION_SECONDS = 365 * 24 * 60 * 60
MAX_WORK_SELECTION_LIMIT = 100
OPERATOR_DEFAULT_LIMIT = 50
OPERATOR_MAX_LIMIT = 100
RECONCILIATION_PAGE_LIMIT = 50
# Identifiers are stored as text; a bound keeps forged messages from carrying megabytes.
MAX_IDENTIFIER_LENGTH = 1024
MAX_BIGINT = 2**63 - 1


T = TypeVar("T")
_WORK_STATES = tuple(state.value for state in WorkState)
_PHASES = frozenset(phase.value for phase in ReconciliationPhase)

_POSITIVE_DECIMAL = re.compile(r"[1-9][0-9]*")
_NON_NEGATIVE_DECIMAL = re.compile(r"0|[1-9][0-9]*")
_ERROR_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")


def _is_whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def encodes_as_utf8(value: str) -> bool:
    """False for text with lone surrogates (what a SQLite value that is not UTF-8 reads as)."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable(value: str) -> bool:
    """Text a database can hold: no NUL (PostgreSQL) and valid UTF-8 (no lone surrogates)."""
    return "\x00" not in value and encodes_as_utf8(value)


def is_usable_identifier(value: object) -> TypeGuard[str]:
    """A non-empty string id of bounded length that both databases can store as text.

    NUL and lone surrogates are refused: PostgreSQL rejects the first and no UTF-8 encoder
    takes the second (a SQLite id that is not UTF-8 reads as one), so either would fail later,
    half-way through a statement or a message.
    """
    return isinstance(value, str) and 0 < len(value) <= MAX_IDENTIFIER_LENGTH and storable(value)


def split_usable(items: Iterable[T], content_id: Callable[[T], object]) -> tuple[list[T], list[T]]:
    """``items`` whose content id is usable, and those whose id is not, in their order."""
    usable: list[T] = []
    unusable: list[T] = []
    for item in items:
        (usable if is_usable_identifier(content_id(item)) else unusable).append(item)
    return usable, unusable


def identifier(value: object, message: str) -> str:
    """``value`` if it is a usable identifier (above), else ``InvalidArgument(message)``."""
    if not is_usable_identifier(value):
        raise InvalidArgument(message)
    return value


def named_identifier(name: str, value: object) -> str:
    """``value`` as the id a caller passed as ``name`` (a parameter or a body field); the
    refusal names it and says whether it was missing or what an id must be."""
    if value is None:
        raise InvalidArgument(
            f"{name} is required: an id of 1 to {MAX_IDENTIFIER_LENGTH:,} characters."
        )
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a string id, not {type(value).__name__}.")
    return identifier(
        value,
        f"{name} must be 1 to {MAX_IDENTIFIER_LENGTH:,} characters of text without NUL "
        f"(this one has {len(value):,}).",
    )


# emdash's ids (collections, fields, media) are ULIDs: 26 characters of Crockford base32.
ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")


def collection_ulid(value: object, name: str) -> str:
    """A collection id as an operator types it: a ULID, as ``work list --json`` shows it."""
    if isinstance(value, str) and ULID.fullmatch(value):
        return value
    shown = f", not {value[:40]!r}" if isinstance(value, str) else ""
    raise InvalidArgument(
        f"{name} must be a collection id: 26 characters of Crockford base32 such as "
        f"01J9Z6Q8V2M3N4P5R6S7T8V9W0, as work list --json shows it{shown}."
    )


def identity(collection_id: object, content_id: object) -> tuple[str, str]:
    message = "Media usage work identity must include collection and content IDs."
    return identifier(collection_id, message), identifier(content_id, message)


def _decimal(value: object, pattern: re.Pattern[str], minimum: int) -> int | None:
    if _is_whole(value):
        number = value
    elif isinstance(value, str) and len(value) <= 19 and pattern.fullmatch(value):
        number = int(value)
    else:
        return None
    return number if minimum <= number <= MAX_BIGINT else None


def work_version(value: object) -> int:
    """A positive whole number, given as an int or a decimal string (node-postgres bigints)."""
    number = _decimal(value, _POSITIVE_DECIMAL, 1)
    if number is None:
        raise InvalidArgument("Media usage work identity must include a work version.")
    return number


def change_epoch(value: object) -> int:
    number = _decimal(value, _NON_NEGATIVE_DECIMAL, 0)
    if number is None:
        raise InvalidArgument("Media usage work change epoch must be a non-negative whole number.")
    return number


def lease_token(value: object) -> str:
    return identifier(value, "Media usage work lease token must not be empty.")


def duration_seconds(value: object, label: str, *, allow_zero: bool) -> int:
    low = 0 if allow_zero else 1
    if not _is_whole(value) or not low <= int(value) <= MAX_PORTABLE_DURATION_SECONDS:
        kind = "a non-negative" if allow_zero else "a positive"
        raise InvalidArgument(
            f"Media usage work {label} must be {kind} whole number of seconds no greater than "
            "one year."
        )
    return int(value)


def error_code(value: object) -> str:
    if not isinstance(value, str) or not _ERROR_CODE.fullmatch(value):
        raise InvalidArgument(
            "Media usage work error code must use a stable SCREAMING_SNAKE_CASE value."
        )
    return value


def due_limit(value: object) -> int:
    if not _is_whole(value) or not 1 <= int(value) <= MAX_WORK_SELECTION_LIMIT:
        raise InvalidArgument(
            "Media usage due-work limit must be a whole number from 1 to "
            f"{MAX_WORK_SELECTION_LIMIT}."
        )
    return int(value)


OPERATOR_LIMIT_RULE = f"limit must be a whole number from 1 to {OPERATOR_MAX_LIMIT}."


def operator_limit(value: object) -> int:
    if value is None:
        return OPERATOR_DEFAULT_LIMIT
    if not _is_whole(value) or not 1 <= int(value) <= OPERATOR_MAX_LIMIT:
        raise InvalidArgument(OPERATOR_LIMIT_RULE)
    return int(value)


def work_state(value: object) -> WorkState | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in _WORK_STATES:
        raise InvalidArgument(f"state must be one of {', '.join(_WORK_STATES)}.")
    return WorkState(value)


def deletion_state(value: object) -> WorkState | None:
    """A deletion listing's state: a work state, or ``all`` (``None``)."""
    if value == "all":
        return None
    if not isinstance(value, str) or value not in _WORK_STATES:
        raise InvalidArgument(f"state must be one of {', '.join(_WORK_STATES)}, all.")
    return WorkState(value)


def reconciliation_phase(value: object) -> ReconciliationPhase:
    if not isinstance(value, str) or value not in _PHASES:
        raise InvalidArgument("Reconciliation enqueue phase must be scan or sources.")
    return ReconciliationPhase(value)


def reconciliation_content_ids(values: object) -> list[str]:
    """Distinct ids in first-seen order, 1..50 of them, none empty."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise InvalidArgument("Reconciliation enqueue content IDs must be a list of strings.")
    distinct = list(dict.fromkeys(values))
    if not 1 <= len(distinct) <= RECONCILIATION_PAGE_LIMIT:
        raise InvalidArgument(
            f"Reconciliation enqueue requires from 1 to {RECONCILIATION_PAGE_LIMIT} content IDs."
        )
    for content_id in distinct:
        identifier(content_id, "Reconciliation enqueue content IDs must not be empty.")
    return distinct
