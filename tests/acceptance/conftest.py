"""Acceptance fixtures: the real Celery app on the test Redis, in-process or as subprocesses."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[2]


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.2) -> None:
    """Poll ``predicate`` until it holds; fail with a clear message at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


def work_rows(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM _emdash_media_usage_work")).scalar_one()


@pytest.fixture
def engine(migrated_url: str) -> Iterator[sa.Engine]:
    """Acceptance tests always start from a migrated database."""
    from repository.db import create_engine

    engine = create_engine(migrated_url)
    yield engine
    engine.dispose()


@pytest.fixture
def broker_url(redis_url: str) -> str:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    client.close()
    return redis_url


@pytest.fixture
def task_env(monkeypatch: pytest.MonkeyPatch, migrated_url: str, broker_url: str) -> dict[str, str]:
    """Environment the tasks read at run time (in this process and in subprocesses)."""
    env = {
        "MEDIA_USAGE_DATABASE_URL": migrated_url,
        "MEDIA_USAGE_BROKER_URL": broker_url,
        "MEDIA_USAGE_TICK_SECONDS": "1",
        "MEDIA_USAGE_LEASE_SECONDS": "3",
        # With 3 s message TTLs, queue no more than the workers drain in about a second.
        "MEDIA_USAGE_MAX_QUEUED": "100",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture
def celery_app(task_env: dict[str, str]):
    """celery.contrib.pytest's worker fixture, pointed at the project's own app."""
    import celery.contrib.testing.tasks  # noqa: F401  (the ping task start_worker uses)

    from tasks import app

    app.conf.broker_url = task_env["MEDIA_USAGE_BROKER_URL"]
    from tasks import ledger

    ledger.forget_all()
    yield app


@pytest.fixture(scope="session")
def celery_worker_parameters() -> dict:
    return {"queues": ("media_usage",), "perform_ping_check": False}


class Processes:
    """``celery -A tasks worker|beat`` subprocesses, killed at teardown."""

    def __init__(self, env: dict[str, str], tmp: Path) -> None:
        self.env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        self.tmp = tmp
        self.running: list[subprocess.Popen] = []

    def _start(self, name: str, args: list[str], prefix: Sequence[str] = ()) -> subprocess.Popen:
        log = open(self.tmp / f"{name}-{len(self.running)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "celery", "-A", "tasks", *args],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.running.append(proc)
        return proc

    def worker(self, concurrency: int = 2, prefix: Sequence[str] = ()) -> subprocess.Popen:
        """A worker; ``prefix`` runs it through a wrapper command (for example ``setpriv``)."""
        return self._start(
            "worker",
            [
                "worker",
                "-Q",
                "media_usage",
                "-c",
                str(concurrency),
                "-l",
                "info",
                "-E",
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
            ],
            prefix,
        )

    def beat(self) -> subprocess.Popen:
        schedule = self.tmp / f"beat-{len(self.running)}"
        return self._start("beat", ["beat", "-s", str(schedule), "-l", "info"])

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.tmp.glob("*.log")))

    def kill(self, proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        proc.wait(timeout=30)

    def stop_all(self) -> None:
        for proc in self.running:
            if proc.poll() is None:
                self.kill(proc)


@pytest.fixture
def processes(task_env: dict[str, str], tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(task_env, tmp_path)
    yield procs
    procs.stop_all()
