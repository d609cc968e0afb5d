"""docker-compose.yml, run without Docker: each service's command and environment, exactly as
written there, against the test PostgreSQL and Redis (only the service host names change).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa
import yaml

from media_usage_worker.domain.sample_content import sample_entries
from repository.activation import activate
from repository.db import create_engine
from repository.migrate import current_revision
from repository.sample_content import create_sample_collections, write_entries
from tests.index_oracle import actual_index, expected_index
from tests.processes import wait_for, work_rows

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
APP_SERVICES = ("migrate", "worker", "beat", "flower")
_VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")
# What an operator would put in .env for a quick local run.
DOTENV = {"MEDIA_USAGE_TICK_SECONDS": "1"}


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ``${NAME:-default}`` substitution (and ``$$`` for a literal dollar)."""
    return _VARIABLE.sub(lambda m: env.get(m[1], m[2] or ""), value).replace("$$", "$")


def service(name: str, database_url: str, redis_url: str) -> tuple[list[str], dict[str, str]]:
    """The service's argv and environment, pointed at the test servers instead of the hosts
    ``postgres`` and ``redis`` of the compose network."""
    spec = SERVICES[name]
    argv = [interpolate(str(part), DOTENV) for part in spec["command"]]
    env = {k: interpolate(str(v), DOTENV) for k, v in spec["environment"].items()}
    compose_db = sa.make_url(env["MEDIA_USAGE_DATABASE_URL"])
    assert (compose_db.drivername, compose_db.host, compose_db.port) == (
        "postgresql+psycopg", "postgres", 5432,
    )  # fmt: skip
    assert env["MEDIA_USAGE_BROKER_URL"].startswith("redis://redis:6379/")
    env["MEDIA_USAGE_DATABASE_URL"] = database_url
    env["MEDIA_USAGE_BROKER_URL"] = redis_url
    executable = {"celery": [sys.executable, "-m", "celery"],
                  "media-usage": [sys.executable, "-m", "media_usage_worker"]}  # fmt: skip
    return executable[argv[0]] + argv[1:], {**os.environ, **env, "PYTHONUNBUFFERED": "1"}


def test_the_services_are_wired_as_production_needs() -> None:
    assert set(SERVICES) == {"postgres", "redis", *APP_SERVICES}
    assert "healthcheck" in SERVICES["postgres"] and "healthcheck" in SERVICES["redis"]
    assert "postgres-data:/var/lib/postgresql/data" in SERVICES["postgres"]["volumes"]
    assert SERVICES["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name in ("worker", "beat", "flower"):
        depends: dict[str, Any] = SERVICES[name]["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}
        assert depends["postgres"] == depends["redis"] == {"condition": "service_healthy"}
    for name in APP_SERVICES:
        assert SERVICES[name]["build"] == "." and (ROOT / "Dockerfile").is_file()
    assert SERVICES["worker"]["command"][:6] == ["celery", "-A", "tasks", "worker", "-Q",
                                                 "media_usage"]  # fmt: skip
    assert "-E" in SERVICES["worker"]["command"]
    assert SERVICES["flower"]["ports"] == ["5555:5555"]
    assert "'.[flower]'" in (ROOT / "Dockerfile").read_text()


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[subprocess.Popen]]:
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _start(procs: list, argv: list[str], env: dict[str, str], log: Path) -> None:
    with log.open("wb") as out:
        procs.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                      start_new_session=True, cwd=log.parent))  # fmt: skip


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.mark.parametrize("dialect", ["postgresql"], indirect=True)
def test_every_service_command_runs_against_real_servers(
    database_url: str, redis_url: str, tmp_path: Path, started: list
) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    argv, env = service("migrate", database_url, redis_url)
    migrated = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert migrated.returncode == 0, migrated.stderr
    engine = create_engine(database_url)
    try:
        assert current_revision(engine) is not None
        create_sample_collections(engine)
        activate(engine)
        for name in ("worker", "beat"):
            _start(started, *service(name, database_url, redis_url), tmp_path / f"{name}.log")
        argv, env = service("flower", database_url, redis_url)
        port = _free_port()
        _start(started, argv, {**env, "FLOWER_PORT": str(port)}, tmp_path / "flower.log")

        write_entries(engine, sample_entries(200))
        wait_for(lambda: work_rows(engine) == 0, timeout=120, interval=0.5)
        expected = expected_index(engine)
        assert len(expected) > 600 and actual_index(engine) == expected
        wait_for(lambda: _answers(f"http://127.0.0.1:{port}/healthcheck"), timeout=60)
    finally:
        engine.dispose()
