"""One SQLAlchemy engine per database URL per process, disposed after a fork."""

from __future__ import annotations

import threading

import sqlalchemy as sa

from repository.db import create_engine
from tasks import settings

_engines: dict[str, sa.Engine] = {}
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


def dispose_all() -> None:
    """Forget pooled connections inherited from a parent process (never share a socket)."""
    with _lock:
        for engine in _engines.values():
            engine.dispose(close=False)
        _engines.clear()
