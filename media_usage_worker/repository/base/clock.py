"""The database clock, in emdash's sortable text format, for both dialects.

Every lease, due time and timestamp of the subsystem is text like ``2025-03-04T05:06:07.089Z``
computed by the database, never by Python, so workers on machines with skewed clocks agree.
These constructs compile to emdash 0.34.0's SQL on each dialect (docs/design.md §7) but for
one deliberate difference: a write uses the statement's start, one instant for every column of
a row (emdash's per-call ``clock_timestamp()`` could stamp ``next_attempt_at`` a millisecond
before ``created_at``). Due checks compare text with the statement start, and work-lease
liveness on PostgreSQL compares as ``timestamptz`` against the wall clock.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

SQLITE_FORMAT = "'%Y-%m-%dT%H:%M:%fZ'"
POSTGRES_FORMAT = """'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'"""


class db_now(FunctionElement[str]):
    """The statement's "now" (plus whole seconds) as sortable text: every column and row one
    statement writes gets the same instant (``statement_timestamp()`` on PostgreSQL; SQLite's
    ``'now'`` is fixed for the length of a statement)."""

    type = sa.Text()
    inherit_cache = True
    name = "db_now"

    def __init__(self, offset_seconds: int | ColumnElement[Any] = 0) -> None:
        offset = (
            offset_seconds
            if isinstance(offset_seconds, ColumnElement)
            else sa.literal(int(offset_seconds), sa.Integer)
        )
        super().__init__(offset)


class db_statement_now(FunctionElement[str]):
    """Statement-start "now" as sortable text (used by due checks on PostgreSQL)."""

    type = sa.Text()
    inherit_cache = True
    name = "db_statement_now"


class db_default_now(FunctionElement[str]):
    """Sortable "now" for column DEFAULT clauses (no bound parameters allowed there)."""

    type = sa.Text()
    inherit_cache = True
    name = "db_default_now"


class db_legacy_now(FunctionElement[str]):
    """emdash's legacy ``currentTimestamp`` default: ``datetime('now')`` / ``CURRENT_TIMESTAMP``."""

    type = sa.Text()
    inherit_cache = True
    name = "db_legacy_now"


class lease_is_live(FunctionElement[bool]):
    """``column > now``; on PostgreSQL compared as timestamptz against the wall clock."""

    type = sa.Boolean()
    inherit_cache = True
    name = "lease_is_live"

    def __init__(self, column: ColumnElement[str]) -> None:
        super().__init__(column)


@compiles(db_now, "sqlite")
def _db_now_sqlite(element: db_now, compiler: Any, **kw: Any) -> str:
    (offset,) = element.clauses
    modifier = compiler.process(offset, **kw)
    return f"strftime({SQLITE_FORMAT}, 'now', ({modifier}) || ' seconds')"


@compiles(db_now, "postgresql")
def _db_now_postgres(element: db_now, compiler: Any, **kw: Any) -> str:
    (offset,) = element.clauses
    seconds = compiler.process(offset, **kw)
    return (
        f"to_char((statement_timestamp() AT TIME ZONE 'UTC') + "
        f"(CAST({seconds} AS integer) * INTERVAL '1 second'), {POSTGRES_FORMAT})"
    )


@compiles(db_statement_now, "sqlite")
@compiles(db_default_now, "sqlite")
def _db_statement_now_sqlite(element: Any, compiler: Any, **kw: Any) -> str:
    return f"strftime({SQLITE_FORMAT}, 'now')"


@compiles(db_statement_now, "postgresql")
def _db_statement_now_postgres(element: Any, compiler: Any, **kw: Any) -> str:
    return f"to_char(statement_timestamp() AT TIME ZONE 'UTC', {POSTGRES_FORMAT})"


@compiles(db_default_now, "postgresql")
def _db_default_now_postgres(element: Any, compiler: Any, **kw: Any) -> str:
    return f"to_char(clock_timestamp() AT TIME ZONE 'UTC', {POSTGRES_FORMAT})"


@compiles(db_legacy_now, "sqlite")
def _db_legacy_now_sqlite(element: Any, compiler: Any, **kw: Any) -> str:
    return "datetime('now')"


@compiles(db_legacy_now, "postgresql")
def _db_legacy_now_postgres(element: Any, compiler: Any, **kw: Any) -> str:
    return "CURRENT_TIMESTAMP"


@compiles(lease_is_live, "sqlite")
def _lease_is_live_sqlite(element: lease_is_live, compiler: Any, **kw: Any) -> str:
    (column,) = element.clauses
    return f"({compiler.process(column, **kw)} > strftime({SQLITE_FORMAT}, 'now'))"


@compiles(lease_is_live, "postgresql")
def _lease_is_live_postgres(element: lease_is_live, compiler: Any, **kw: Any) -> str:
    (column,) = element.clauses
    return f"(CAST({compiler.process(column, **kw)} AS timestamptz) > clock_timestamp())"


def is_due(column: ColumnElement[str]) -> ColumnElement[bool]:
    """``column <= now`` at statement start, as a text comparison (sortable format)."""
    return column <= db_statement_now()


def is_live_by_text(column: ColumnElement[str]) -> ColumnElement[bool]:
    """``column > now`` as a text comparison (reconciliation leases)."""
    return column > db_statement_now()
