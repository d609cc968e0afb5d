"""Alembic migrations, run programmatically (no alembic.ini to ship or to find).

``upgrade`` is idempotent and safe to run from several processes at once: on PostgreSQL the run
holds a transaction-level advisory lock, on SQLite the engine's ``BEGIN IMMEDIATE`` already
serialises writers. The version table has its own name so a host application's Alembic history
in the same database is left alone.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from media_usage_worker.domain.errors import DatabaseNotReady, InvalidArgument
from media_usage_worker.repository.base import statistics
from media_usage_worker.repository.base.db import create_engine, refuse_missing_sqlite_file
from media_usage_worker.repository.migration.adoption import TableAdoption, adopt, adoption_plan

VERSION_TABLE = "_media_usage_worker_migrations"
MIGRATIONS_DIR = Path(__file__).with_name("scripts")
# Any constant shared by all migrators; pg_advisory_xact_lock takes a bigint.
ADVISORY_LOCK_KEY = 0x6D656469615F7573  # "media_us"


@contextmanager
def _engine(url_or_engine: str | sa.Engine) -> Iterator[sa.Engine]:
    if isinstance(url_or_engine, sa.Engine):
        yield url_or_engine
        return
    engine = create_engine(url_or_engine, poolclass=sa.NullPool)
    try:
        yield engine
    finally:
        engine.dispose()


def _config(connection: sa.Connection) -> Config:
    config = _config_without_connection()
    config.attributes["connection"] = connection
    return config


@contextmanager
def _migrating(url_or_engine: str | sa.Engine) -> Iterator[sa.Connection]:
    with _engine(url_or_engine) as engine, engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            # Two migrators at once wait for each other instead of racing on CREATE TABLE.
            connection.execute(sa.select(sa.func.pg_advisory_xact_lock(ADVISORY_LOCK_KEY)))
        yield connection


def upgrade(url_or_engine: str | sa.Engine, revision: str = "head") -> list[TableAdoption]:
    """Apply migrations up to ``revision`` (default: all), and adopt the media usage tables the
    database already had (``repository.adoption``): what each gained. Running it again
    changes nothing. One transaction: a table that cannot be adopted changes nothing at all."""
    with _migrating(url_or_engine) as connection:
        # Before the migrations, so that they read existing tables whole; after, for tables a
        # migration of an older version left behind.
        adopted = adoption_plan(connection)
        adopt(connection, adopted)
        command.upgrade(_config(connection), revision)
        later = adoption_plan(connection)
        adopt(connection, later)
    # Statistics for the planner from the start (repository.statistics).
    with _engine(url_or_engine) as engine:
        statistics.refresh(engine)
    return adopted + later


def upgrade_plan(url_or_engine: str | sa.Engine) -> tuple[list[str], list[TableAdoption]]:
    """What ``upgrade`` would do, doing nothing: the revisions it would apply, oldest first,
    and what it would add to the tables the database already has."""
    with _engine(url_or_engine) as engine, engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        current = context.get_current_revision()
        scripts = ScriptDirectory.from_config(_config_without_connection())
        pending = [s.revision for s in scripts.iterate_revisions("head", current or "base")]
        plan = adoption_plan(connection)
    return list(reversed(pending)), plan


def downgrade(url_or_engine: str | sa.Engine, revision: str = "base") -> None:
    """Revert to ``revision``; raises ``DowngradeRefused`` while media usage state exists.

    ``revision`` is checked (``check_revision``) before any I/O.
    """
    check_revision(revision)
    with _migrating(url_or_engine) as connection:
        command.downgrade(_config(connection), revision)


def current_revision(url_or_engine: str | sa.Engine) -> str | None:
    with _engine(url_or_engine) as engine, engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()


@functools.cache
def head_revision() -> str:
    """The newest revision this code ships."""
    scripts = ScriptDirectory.from_config(_config_without_connection())
    head = scripts.get_current_head()
    assert head is not None
    return head


def check_revision(revision: object) -> str:
    """``revision`` if it is ``base`` or a revision this code ships, else ``InvalidArgument``."""
    known = _known_revisions()
    if revision == "base" or revision in known:
        return str(revision)
    shown = repr(revision[:100]) if isinstance(revision, str) else "that value"
    raise InvalidArgument(f"Unknown revision {shown}: use base or one of {', '.join(known)}.")


@functools.cache
def _known_revisions() -> tuple[str, ...]:
    scripts = ScriptDirectory.from_config(_config_without_connection())
    return tuple(sorted(script.revision for script in scripts.walk_revisions()))


def _config_without_connection() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


# How ``schema_problem`` begins when the database cannot be reached or read at all.
UNREADABLE = "the database cannot be read"


def schema_problem(engine: sa.Engine) -> str | None:
    """``None`` when the database has this code's schema, else what an operator must do."""
    try:
        current = current_revision(engine)
    except sa.exc.DBAPIError as exc:
        detail = (str(exc.orig).strip().splitlines() or [type(exc.orig).__name__])[0]
        return f"{UNREADABLE}: {detail[:300]}"
    head = head_revision()
    if current == head:
        return None
    if current is None:
        return "the database has no media usage schema: run media-usage db upgrade"
    return (
        f"the database schema is at {current}, this code needs {head}: run media-usage db upgrade"
    )


def open_migrated(url: str | sa.URL) -> sa.Engine:
    """An engine on an existing database that has this code's schema. A SQLite path with no
    file, or a database to migrate, is ``DatabaseNotReady`` saying what to run; nothing is
    created and no statement fails half-way on a missing table."""
    engine = create_engine(refuse_missing_sqlite_file(url))
    problem = schema_problem(engine)
    if problem is not None:
        engine.dispose()
        raise DatabaseNotReady(problem)
    return engine
