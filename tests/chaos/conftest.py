"""Chaos fixtures: servers of their own (they get flushed, restarted and killed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.repository.migration.migrate import upgrade
from tests.processes import Processes
from tests.servers import PostgresServer, RedisServer, start_or_skip


@pytest.fixture
def chaos_redis() -> Iterator[RedisServer]:
    server = start_or_skip(RedisServer, "Redis")
    yield server
    server.stop()


@pytest.fixture
def chaos_database(dialect: str, tmp_path: Path) -> Iterator[tuple[str, PostgresServer | None]]:
    """A migrated database; on PostgreSQL with a server of its own, so it can be restarted."""
    if dialect == "sqlite":
        url = f"sqlite:///{tmp_path / 'chaos.db'}"
        upgrade(url)
        yield url, None
        return
    server = start_or_skip(PostgresServer, "PostgreSQL")
    try:
        admin = create_engine(server.admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql("CREATE DATABASE chaos")
        admin.dispose()
        url = sa.make_url(server.admin_url).set(database="chaos", drivername="postgresql+psycopg")
        rendered = url.render_as_string(hide_password=False)
        upgrade(rendered)
        yield rendered, server
    finally:
        server.stop()


@pytest.fixture
def fleet(chaos_database, chaos_redis: RedisServer, tmp_path: Path) -> Iterator[Processes]:
    url, _ = chaos_database
    env = {
        "MEDIA_USAGE_DATABASE_URL": url,
        "MEDIA_USAGE_BROKER_URL": chaos_redis.url,
        "MEDIA_USAGE_TICK_SECONDS": "1",
        "MEDIA_USAGE_RECONCILE_SECONDS": "1",
        "MEDIA_USAGE_RECONCILE_DEFER_SECONDS": "1",
        "MEDIA_USAGE_LEASE_SECONDS": "5",
        "MEDIA_USAGE_MAX_QUEUED": "150",
    }
    procs = Processes(env, tmp_path)
    yield procs
    procs.stop_all()
