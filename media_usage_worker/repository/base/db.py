"""Engine construction for the two supported databases.

SQLite is tuned for several worker processes sharing one file: WAL so readers never block the
writer, a generous busy timeout, and ``BEGIN IMMEDIATE`` for every transaction that may write,
so a claimer takes the write lock up front instead of failing with "database is locked" when it
tries to upgrade a read lock half-way through a compare-and-set. Transactions that only read
(``read_transaction``) begin deferred and never wait for that lock.

PostgreSQL goes through psycopg 3 at READ COMMITTED (every state change is one guarded
statement, so nothing needs a stronger level) with ``pool_pre_ping`` so a restarted server costs
one reconnect instead of one failed task.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError

from media_usage_worker.domain.errors import DatabaseNotReady, InvalidDatabaseURL
from media_usage_worker.repository.base.stored_text import decode_text

SQLITE_BUSY_TIMEOUT_SECONDS = 30
POSTGRES_DRIVERS = {"", "psycopg"}
SQLITE_DRIVERS = {"", "pysqlite"}


ACCEPTED_URLS = "sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DATABASE"


def parse_database_url(url: str | URL) -> URL:
    """Validate ``url`` and return it with the driver this project uses.

    The scheme is read as text: asking SQLAlchemy for the backend would load a dialect plugin
    for whatever name the URL carries (``postgres``, ``http``) and fail with a loader error.
    """
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError, TypeError) as exc:
        raise InvalidDatabaseURL(
            f"Database URL {str(url)[:200]!r} is malformed: use {ACCEPTED_URLS}."
        ) from exc
    try:
        port = parsed.port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        raise InvalidDatabaseURL(f"Database URL port must be from 1 to 65535: use {ACCEPTED_URLS}.")
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "sqlite" and driver in SQLITE_DRIVERS:
        if not parsed.database or parsed.database == ":memory:":
            raise InvalidDatabaseURL(
                "SQLite needs a file path (sqlite:///path.db); an in-memory database cannot be "
                "shared between workers."
            )
        return parsed.set(drivername="sqlite")
    if backend in {"postgresql", "postgres"} and driver in POSTGRES_DRIVERS:
        if not parsed.database:
            raise InvalidDatabaseURL(f"A PostgreSQL URL must name a database: {ACCEPTED_URLS}.")
        return parsed.set(drivername="postgresql+psycopg")
    raise InvalidDatabaseURL(
        f"Unsupported database URL scheme {parsed.drivername[:100]!r}: use {ACCEPTED_URLS}."
    )


def refuse_missing_sqlite_file(url: str | URL) -> URL:
    """``url`` parsed; a SQLite path with no file is ``DatabaseNotReady``. Connecting would
    create an empty file, so only the migration (``db upgrade``) may bring one into being."""
    parsed = parse_database_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = Path(parsed.database or "")
        if not path.is_file():
            raise DatabaseNotReady(
                f"no database at {path}: run media-usage db upgrade to create it"
            )
    return parsed


def create_engine(url: str | URL, **overrides: Any) -> Engine:
    """Create the engine for ``url`` (SQLite file or PostgreSQL), configured as described above."""
    parsed = parse_database_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _create_sqlite_engine(parsed, overrides)
    return _create_postgres_engine(parsed, overrides)


def _create_postgres_engine(url: URL, overrides: dict[str, Any]) -> Engine:
    options: dict[str, Any] = {
        "pool_pre_ping": True,
        "isolation_level": "READ COMMITTED",
        # Column defaults use CURRENT_TIMESTAMP::text, so pin the session zone to UTC.
        # Custom plans: psycopg prepares a statement it runs often, and a generic plan made
        # while the index tables were nearly empty (a first reconciliation, a fresh site) kept
        # scanning them whole once they held thousands of rows; planned per execution, each
        # statement sees the tables as they are (a fraction of a millisecond per statement).
        "connect_args": {"options": "-c timezone=UTC -c plan_cache_mode=force_custom_plan"},
    }
    options.update(overrides)
    engine = sa.create_engine(url, **options)
    event.listen(engine, "handle_error", _discard_read_only_postgres)
    return engine


def _discard_read_only_postgres(context: sa.engine.ExceptionContext) -> None:
    # SQLSTATE 25006: the server (a standby after a failover, or one set read-only) refused a
    # write. The connection is discarded so the next one can reach a writable primary.
    if getattr(context.original_exception, "sqlstate", None) == "25006":
        context.is_disconnect = True


# pysqlite errors after which a connection is discarded, not reused: SQLite opens a file that
# is read-only at that moment read-only for good, and a file that could not be opened or read
# leaves the connection unusable. A new connection sees the file as it is now.
_SQLITE_REOPEN_ON = (
    "attempt to write a readonly database",
    "unable to open database file",
    "disk i/o error",
)


def _discard_unusable_sqlite(context: sa.engine.ExceptionContext) -> None:
    message = str(context.original_exception).lower()
    if isinstance(context.original_exception, sqlite3.OperationalError) and any(
        text in message for text in _SQLITE_REOPEN_ON
    ):
        context.is_disconnect = True
        # The failed statement's cursor would keep the database handle open after the
        # connection is closed (a "zombie" until garbage collection), and a handle still open in
        # this process makes SQLite share its read-only state with every new connection.
        cursor = getattr(context.execution_context, "cursor", None)
        if cursor is not None:
            with contextlib.suppress(sqlite3.Error):
                cursor.close()


def _create_sqlite_engine(url: URL, overrides: dict[str, Any]) -> Engine:
    options: dict[str, Any] = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_SECONDS}}
    options.update(overrides)
    engine = sa.create_engine(url, **options)

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from pysqlite so BEGIN IMMEDIATE below is the only BEGIN.
        dbapi_connection.isolation_level = None
        # Text that is not UTF-8 must not make a whole statement fail (repository.stored_text).
        dbapi_connection.text_factory = decode_text
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_SECONDS * 1000}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    event.listen(engine, "handle_error", _discard_unusable_sqlite)

    @event.listens_for(engine, "begin")
    def _begin(connection: sa.Connection) -> None:
        # A reader takes no lock up front, so it never waits behind a long writer (WAL).
        deferred = connection.get_execution_options().get(_READ_ONLY, False)
        connection.exec_driver_sql("BEGIN" if deferred else "BEGIN IMMEDIATE")

    return engine


Bind = Engine | sa.Connection


@contextmanager
def transaction(bind: Bind) -> Iterator[sa.Connection]:
    """One transaction on ``bind``, or the one it is already in.

    An engine lends a pooled connection for it; a held connection is reused, so a caller that
    runs several steps (the processor) pays for one checkout and one pre-ping, not one per step.
    Each call on an engine or an idle connection commits on its own. On a connection already
    inside a transaction the call joins it: the caller's transaction commits or rolls back the
    whole, so one function serves both a step of its own and a part of a larger one.
    """
    if isinstance(bind, Engine):
        with bind.connect() as conn, _begun(conn):
            yield conn
    elif bind.in_transaction():
        yield bind
    else:
        with _begun(bind):
            yield bind


@contextmanager
def _begun(conn: sa.Connection) -> Iterator[None]:
    """``conn.begin()`` as a context, but the body's exception is the one that propagates.

    A worker's soft time limit can arrive while a statement is in flight; the driver then has
    a command in progress and the rollback fails ("another command is already in progress").
    Raised from the rollback, that error would hide the interrupt from the code that knows
    what it means. The connection is discarded instead: one that cannot roll back is never
    reused.
    """
    begun = conn.begin()
    try:
        yield
    except BaseException:
        try:
            begun.rollback()
        except Exception:
            conn.invalidate()
        raise
    begun.commit()


_READ_ONLY = "media_usage_read_only"


@contextmanager
def read_transaction(bind: Bind) -> Iterator[sa.Connection]:
    """One transaction that only reads: on SQLite a deferred ``BEGIN`` instead of ``IMMEDIATE``.

    In WAL mode a deferred reader sees the last commit and never waits for the write lock, so
    ``status``, listings and the tick's selection answer at once behind a long writer. Only
    statements that write nothing belong here: a deferred transaction that writes would have to
    upgrade its lock half-way, which is what ``BEGIN IMMEDIATE`` exists to avoid. On a
    connection already inside a transaction the reads join it, whatever kind it is.
    """
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            conn.execution_options(**{_READ_ONLY: True})
            with _begun(conn):
                yield conn
        return
    if bind.in_transaction():
        yield bind
        return
    bind.execution_options(**{_READ_ONLY: True})
    try:
        with _begun(bind):
            yield bind
    finally:
        bind.execution_options(**{_READ_ONLY: False})


P = ParamSpec("P")
R = TypeVar("R")


def on_bind(statement: Callable[Concatenate[Bind, P], R]) -> Callable[Concatenate[Any, P], R]:
    """A method that runs the module function ``statement`` over the object's bind: how the
    public objects (the work repository, the collection registry) stay thin adapters."""

    @functools.wraps(statement)
    def method(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return statement(self.bind, *args, **kwargs)

    return method
