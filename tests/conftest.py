"""Shared fixtures: real SQLite files, a real PostgreSQL server and a real redis-server.

Servers come from ``MEDIA_USAGE_TEST_POSTGRES_URL`` / ``MEDIA_USAGE_TEST_REDIS_URL`` when set,
else are started from the binaries on the machine for the session. A server that cannot be had
skips its tests with the reason, except under ``CI`` where that is a failure.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

# celery.contrib.pytest's fixtures, imported by name so they shadow pytest-celery 1.x's Docker ones.
from celery.contrib.pytest import celery_app, celery_worker  # noqa: F401
from hypothesis import Phase, settings

from media_usage_worker.repository.base.db import create_engine
from tests.servers import PostgresServer, RedisServer, start_or_skip

DIALECTS = ["sqlite", "postgresql"]

# Every database a test makes is thrown away: keep them (SQLite files, the PostgreSQL cluster,
# pytest's tmp_path) in memory-backed /dev/shm where the machine has it. It takes about a tenth
# off the quick tier and changes no behaviour under test. An explicit TMPDIR wins.
if "TMPDIR" not in os.environ and os.access("/dev/shm", os.W_OK | os.X_OK):
    os.environ["TMPDIR"] = "/dev/shm"
    tempfile.tempdir = None  # forget a directory chosen before this ran

# CI: reproducible examples and no minutes-long shrinking of a failure (its blob is printed).
settings.register_profile(
    "ci",
    derandomize=True,
    print_blob=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
)
if os.environ.get("CI"):
    settings.load_profile("ci")


# The slow tier: whole pipelines with real worker and beat processes, chaos and benchmarks.
SLOW_TIERS = ("acceptance", "chaos")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/acceptance and tests/chaos is the slow tier (``-m slow``)."""
    for item in items:
        if Path(item.path).parent.name in SLOW_TIERS:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    configured = os.environ.get("MEDIA_USAGE_TEST_POSTGRES_URL")
    if configured:
        yield configured
        return
    server = start_or_skip(PostgresServer, "PostgreSQL")
    try:
        yield server.admin_url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    configured = os.environ.get("MEDIA_USAGE_TEST_REDIS_URL")
    if configured:
        yield configured
        return
    server = start_or_skip(RedisServer, "Redis")
    try:
        yield server.url
    finally:
        server.stop()


class PostgresDatabases:
    """Creates and drops databases on the test server through one AUTOCOMMIT connection."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.admin = create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)

    def url_for(self, name: str) -> str:
        return sa.make_url(self.admin_url).set(database=name).render_as_string(hide_password=False)

    def create(self, template: str | None = None) -> str:
        name = f"t_{uuid.uuid4().hex[:16]}"
        clause = f" TEMPLATE {template}" if template else ""
        with self.admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}{clause}")
        return name

    def drop(self, name: str) -> None:
        with self.admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def postgres_databases(postgres_admin_url: str) -> Iterator[PostgresDatabases]:
    databases = PostgresDatabases(postgres_admin_url)
    yield databases
    databases.admin.dispose()


@pytest.fixture(params=DIALECTS)
def dialect(request: pytest.FixtureRequest) -> str:
    """Runs the requesting test once on SQLite and once on PostgreSQL."""
    return request.param


def _fresh_url(
    dialect: str, request: pytest.FixtureRequest, tmp_path: Path, template: str | None
) -> Iterator[str]:
    if dialect == "sqlite":
        path = tmp_path / "media_usage.db"
        if template:
            shutil.copyfile(template, path)
        yield f"sqlite:///{path}"
        return
    databases: PostgresDatabases = request.getfixturevalue("postgres_databases")
    name = databases.create(template)
    try:
        yield databases.url_for(name)
    finally:
        databases.drop(name)


@pytest.fixture
def database_url(dialect: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database of the current dialect."""
    yield from _fresh_url(dialect, request, tmp_path, template=None)


@pytest.fixture
def engine(database_url: str) -> Iterator[sa.Engine]:
    engine = create_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def migrated_templates(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], str]:
    """Per dialect, a database with the schema applied, built once and cloned per test; and one
    that also holds the ``posts`` collection with capture active (see ``migrated_url``)."""
    return {}


def _template_for(dialect: str, request: pytest.FixtureRequest, *, with_posts: bool) -> str:
    from media_usage_worker.repository.migration.migrate import upgrade
    from tests.support import active_collection

    templates: dict[tuple[str, bool], str] = request.getfixturevalue("migrated_templates")
    key = (dialect, with_posts)
    if key in templates:
        return templates[key]
    base = _template_for(dialect, request, with_posts=False) if with_posts else None
    if dialect == "sqlite":
        path = request.getfixturevalue("tmp_path_factory").mktemp("template") / "template.db"
        if base:
            shutil.copyfile(base, path)
        url = f"sqlite:///{path}"
    else:
        databases: PostgresDatabases = request.getfixturevalue("postgres_databases")
        name = databases.create(base)
        url = databases.url_for(name)
    engine = create_engine(url, poolclass=sa.NullPool)
    if with_posts:
        active_collection(engine)
    else:
        upgrade(engine)
    engine.dispose()  # on SQLite the last connection to close checkpoints the WAL into the file
    templates[key] = str(path) if dialect == "sqlite" else name
    return templates[key]


@pytest.fixture
def migrated_url(dialect: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database of the current dialect with every migration applied.

    A test that asks for ``posts`` (tests/integration/conftest.py) gets a clone of a template
    in which that collection already exists with capture active: the state ``posts`` stands
    for, built once per session instead of once per test.
    """
    template = _template_for(dialect, request, with_posts="posts" in request.fixturenames)
    yield from _fresh_url(dialect, request, tmp_path, template=template)


@pytest.fixture
def db(migrated_url: str) -> Iterator[sa.Engine]:
    """An engine on a fresh, migrated database of the current dialect."""
    engine = create_engine(migrated_url)
    yield engine
    engine.dispose()
