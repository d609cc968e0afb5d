"""Acceptance fixtures: the real Celery app on the test Redis, in-process or as subprocesses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.processes import Processes


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

    from media_usage_worker.tasks import app

    app.conf.broker_url = task_env["MEDIA_USAGE_BROKER_URL"]
    from media_usage_worker.tasks import ledger

    ledger.forget_all()
    yield app


@pytest.fixture(scope="session")
def celery_worker_parameters() -> dict:
    return {"queues": ("media_usage",), "perform_ping_check": False}


@pytest.fixture
def processes(task_env: dict[str, str], tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(task_env, tmp_path)
    yield procs
    procs.stop_all()
