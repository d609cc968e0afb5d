"""docker-compose.yml, run without Docker: each service's command and environment, exactly as
written there, against the test PostgreSQL and Redis (only the service host names change).
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa
import yaml

from media_usage_worker.domain.sample_content import sample_entries
from media_usage_worker.pipeline.capture import activate
from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.repository.migration.migrate import current_revision
from media_usage_worker.sample_content import (
    create_sample_collections,
    write_entries,
)
from tests.index_oracle import actual_index, expected_index
from tests.processes import wait_for, work_rows

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
APP_SERVICES = ("migrate", "worker", "beat", "flower", "api")
_VARIABLE = re.compile(r"(?<!\$)\$\{(\w+)(?:(:-|:\?|-)([^}]*))?\}")
# What an operator would put in .env for a quick local run.
DOTENV = {
    "MEDIA_USAGE_TICK_SECONDS": "1",
    "FLOWER_BASIC_AUTH": "ops:s3cret",
    "POSTGRES_PASSWORD": "pg-s3cret",
}


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ``${NAME:-default}``, ``${NAME-default}`` (unset only) and ``${NAME:?error}``
    substitution (and ``$$`` for a literal dollar, left for the container's shell)."""

    def substitute(match: re.Match[str]) -> str:
        name, kind, text = match[1], match[2], match[3]
        if name in env and (env[name] or kind in ("-", None)):
            return env[name]
        if kind == ":?":
            raise LookupError(f"compose refuses to start: {text}")
        return text or ""

    return _VARIABLE.sub(substitute, value).replace("$$", "$")


def service(
    name: str, database_url: str, redis_url: str, tmp: Path
) -> tuple[list[str], dict[str, str]]:
    """The service's argv and environment, pointed at the test servers instead of the hosts
    ``postgres`` and ``redis`` of the compose network (and files at ``tmp``)."""
    spec = SERVICES[name]
    argv = [interpolate(str(part), DOTENV) for part in spec["command"]]
    env = {k: interpolate(str(v), DOTENV) for k, v in spec["environment"].items()}
    env["MEDIA_USAGE_BEAT_LIVENESS_FILE"] = str(tmp / "beat.alive")
    if env.get("MEDIA_USAGE_STORAGE_DIR") == "/srv/media":  # the site's media folder, mounted
        (tmp / "media").mkdir(exist_ok=True)
        env["MEDIA_USAGE_STORAGE_DIR"] = str(tmp / "media")
    compose_db = sa.make_url(env["MEDIA_USAGE_DATABASE_URL"])
    assert (compose_db.drivername, compose_db.host, compose_db.port) == (
        "postgresql+psycopg", "postgres", 5432,
    )  # fmt: skip
    assert env["MEDIA_USAGE_BROKER_URL"].startswith("redis://redis:6379/")
    env["MEDIA_USAGE_DATABASE_URL"] = database_url
    env["MEDIA_USAGE_BROKER_URL"] = redis_url
    executable = {"celery": [sys.executable, "-m", "celery"],
                  "media-usage": [sys.executable, "-m", "media_usage_worker"],
                  "sh": ["sh"]}  # fmt: skip
    # A shell command finds ``celery`` first on PATH, as in the image.
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    env = {**os.environ, **env, "PYTHONUNBUFFERED": "1", "PATH": path}
    return executable[argv[0]] + argv[1:], env


def healthcheck(name: str, env: dict[str, str], port: int | None = None) -> bool:
    """Whether the service's own healthcheck passes, run as Docker runs it (``celery`` and
    ``python`` are this virtualenv's, first on PATH as they are in the image)."""
    kind, *argv = [interpolate(str(part), DOTENV) for part in SERVICES[name]["healthcheck"]["test"]]
    if port is not None:
        argv = [re.sub(r":(5555|8080)/", f":{port}/", part) for part in argv]
    if kind == "CMD-SHELL":
        argv = ["sh", "-c", *argv]
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    shell_env = {**env, "HOSTNAME": socket.gethostname(), "PATH": path}
    return subprocess.run(argv, env=shell_env, capture_output=True, timeout=60).returncode == 0


def test_the_services_are_wired_as_production_needs() -> None:
    assert set(SERVICES) == {"postgres", "redis", *APP_SERVICES}
    assert "healthcheck" in SERVICES["postgres"] and "healthcheck" in SERVICES["redis"]
    assert "postgres-data:/var/lib/postgresql/data" in SERVICES["postgres"]["volumes"]
    assert SERVICES["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name in ("worker", "beat", "flower", "api"):
        depends: dict[str, Any] = SERVICES[name]["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}
        assert depends["postgres"] == {"condition": "service_healthy"}
        # The API reads the database only; the others need the broker.
        assert ("redis" in depends) == (name != "api")
    # One image, built once: by migrate, the first app service to start.
    assert [n for n in SERVICES if "build" in SERVICES[n]] == ["migrate"]
    assert SERVICES["migrate"]["build"] == "." and (ROOT / "Dockerfile").is_file()
    assert len({SERVICES[n]["image"] for n in APP_SERVICES}) == 1
    assert all(SERVICES[n]["pull_policy"] == "never" for n in ("worker", "beat", "flower", "api"))
    assert SERVICES["worker"]["command"][:6] == ["celery", "-A", "tasks", "worker", "-Q",
                                                 "${MEDIA_USAGE_QUEUE:-media_usage}"]  # fmt: skip
    assert "-E" in SERVICES["worker"]["command"]
    assert all("healthcheck" in SERVICES[n] for n in ("worker", "beat", "flower", "api"))
    assert SERVICES["flower"]["ports"] == ["${FLOWER_BIND:-127.0.0.1}:5555:5555"]
    assert SERVICES["api"]["ports"] == ["${API_BIND:-127.0.0.1}:8080:8080"]
    assert "'.[flower,api]'" in (ROOT / "Dockerfile").read_text()
    # Flower runs only with its profile, so a site without it needs no Flower settings.
    assert SERVICES["flower"]["profiles"] == ["flower"]
    assert interpolate(SERVICES["flower"]["environment"]["FLOWER_BASIC_AUTH"], {}) == ""
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "*.db", ".git", "tests"} <= set(ignored)


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


def _status(url: str, basic_auth: str | None = None) -> int:
    """The HTTP status ``url`` answers with (0: no answer)."""
    request = urllib.request.Request(url)
    if basic_auth is not None:
        token = base64.b64encode(basic_auth.encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


@pytest.mark.parametrize("dialect", ["postgresql"], indirect=True)
def test_every_service_command_runs_against_real_servers(
    database_url: str, redis_url: str, tmp_path: Path, started: list
) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    apps = {name: service(name, database_url, redis_url, tmp_path) for name in APP_SERVICES}
    argv, env = apps["migrate"]
    migrated = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert migrated.returncode == 0, migrated.stderr
    engine = create_engine(database_url)
    try:
        assert current_revision(engine) is not None
        create_sample_collections(engine)
        activate(engine)
        assert not healthcheck("beat", apps["beat"][1])  # not started: no liveness file yet
        for name in ("worker", "beat"):
            _start(started, *apps[name], tmp_path / f"{name}.log")
        argv, env = apps["flower"]
        # Flower is never served without basic auth: its command refuses to start.
        bare = {**env, "FLOWER_BASIC_AUTH": ""}
        refused = subprocess.run(argv, env=bare, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and "set FLOWER_BASIC_AUTH" in refused.stderr
        port = _free_port()
        _start(started, argv, {**env, "FLOWER_PORT": str(port)}, tmp_path / "flower.log")

        write_entries(engine, sample_entries(200))
        wait_for(lambda: work_rows(engine) == 0, timeout=120, interval=0.5)
        expected = expected_index(engine)
        assert len(expected) > 600 and actual_index(engine) == expected

        for name in ("worker", "beat"):
            wait_for(lambda name=name: healthcheck(name, apps[name][1]), timeout=60, interval=1)
        wait_for(lambda: healthcheck("flower", env, port), timeout=60, interval=0.5)
        # Flower answers only with the credentials of FLOWER_BASIC_AUTH.
        assert _status(f"http://127.0.0.1:{port}/api/workers") == 401
        assert _status(f"http://127.0.0.1:{port}/api/workers", DOTENV["FLOWER_BASIC_AUTH"]) == 200
        # The API: ready once the database answers; with no token in .env it fails closed.
        argv, env = apps["api"]
        port = _free_port()
        argv = [part if part != "8080" else str(port) for part in argv]
        _start(started, argv, env, tmp_path / "api.log")
        wait_for(lambda: healthcheck("api", env, port), timeout=60, interval=0.5)
        assert _status(f"http://127.0.0.1:{port}/v1/status") == 403
        # The worker's check pings this very node: once it is gone, the check fails.
        os.killpg(started[0].pid, signal.SIGKILL)
        started[0].wait(timeout=30)
        assert not healthcheck("worker", apps["worker"][1])
    finally:
        engine.dispose()
