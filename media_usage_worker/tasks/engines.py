"""One SQLAlchemy engine per database URL per process, disposed after a fork."""

from __future__ import annotations

import logging
import threading

import sqlalchemy as sa

from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.repository.migration.migrate import schema_problem
from media_usage_worker.tasks import settings

log = logging.getLogger(__name__)
_engines: dict[str, sa.Engine] = {}
# Per engine (one per URL per process, new after a fork): checked until the schema is there.
_migrated: set[sa.Engine] = set()
_reported: dict[sa.Engine, str] = {}
_lock = threading.Lock()


def get_engine(url: str | None = None) -> sa.Engine:
    """The process's engine for ``url`` (default: ``MEDIA_USAGE_DATABASE_URL`` right now)."""
    url = url or settings.database_url()
    engine = _engines.get(url)
    if engine is None:
        with _lock:
            engine = _engines.get(url)
            if engine is None:
                engine = _engines[url] = create_engine(url)
    return engine


def migrated_engine() -> sa.Engine | None:
    """The process's engine, or ``None`` while its database lacks this code's schema.

    A worker or beat started before ``media-usage db upgrade`` then logs one line saying so
    (once per process and problem) instead of a traceback on every tick, and starts working
    as soon as the schema is there.
    """
    engine = get_engine()
    if engine in _migrated:
        return engine
    problem = schema_problem(engine)
    report_waiting(engine, problem)
    if problem is None:
        _migrated.add(engine)
        return engine
    return None


def waiting_for() -> str:
    """Why ``migrated_engine`` returned ``None``, in words: the schema to migrate, or the
    database that cannot be read (a full disk, a refused connection), as reported."""
    problem = _reported.get(get_engine(), "not migrated")
    return "not migrated" if "db upgrade" in problem else problem


def report_waiting(engine: sa.Engine, problem: str | None) -> None:
    """Log why media usage is waiting on ``engine``'s database, once per process and problem
    (``None``: it is not waiting, so the next problem is reported again)."""
    if problem is None:
        _reported.pop(engine, None)
    elif _reported.get(engine) != problem:
        _reported[engine] = problem
        log.warning("media usage is waiting: %s", problem)


def dispose_all() -> None:
    """Forget pooled connections inherited from a parent process (never share a socket)."""
    with _lock:
        for engine in _engines.values():
            engine.dispose(close=False)
        _engines.clear()
        _migrated.clear()
        _reported.clear()
