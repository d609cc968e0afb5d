"""The bench's own servers, databases and worker processes (the test suite's helpers)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis
import sqlalchemy as sa

from media_usage_worker.domain.sample_content import COLLECTIONS, sample_entries
from media_usage_worker.pipeline.capture import activate
from media_usage_worker.pipeline.repair import repair_collection
from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.repository.migration.migrate import upgrade
from media_usage_worker.sample_content import (
    create_sample_collections,
    write_entries,
)
from tests.servers import PostgresServer, RedisServer

ROOT = Path(__file__).resolve().parents[1]


class Bench(contextlib.ExitStack):
    """PostgreSQL and Redis of its own; fresh databases and celery processes on demand."""

    def __enter__(self) -> Bench:
        super().__enter__()
        self.tmp = Path(tempfile.mkdtemp(prefix="media-usage-bench-"))
        self.pg = PostgresServer().start()
        self.callback(self.pg.stop)
        self.redis = RedisServer().start()
        self.callback(self.redis.stop)
        self.procs: list[subprocess.Popen] = []
        self.spawned = 0
        self.callback(self.stop_all)
        return self

    def database(self, dialect: str) -> str:
        """A fresh, migrated database with the sample collections, capture active."""
        url = self.inactive_database(dialect)
        engine = create_engine(url)
        activate(engine)
        # Reconcile the still-empty collections now, as a site that has been running would be:
        # the benchmarks measure incremental work, not a first reconciliation.
        for slug in COLLECTIONS:
            assert repair_collection(engine, slug).status == "complete"
        engine.dispose()
        return url

    def inactive_database(self, dialect: str) -> str:
        """A fresh, migrated database with the sample collections, capture not yet active."""
        if dialect == "sqlite":
            url = f"sqlite:///{self.tmp / uuid.uuid4().hex}.db"
        else:
            name = f"b_{uuid.uuid4().hex[:12]}"
            admin = create_engine(self.pg.admin_url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.exec_driver_sql(f"CREATE DATABASE {name}")
            admin.dispose()
            pg_url = sa.make_url(self.pg.admin_url)
            url = pg_url.set(database=name, drivername="postgresql+psycopg").render_as_string(
                hide_password=False
            )
        upgrade(url)
        engine = create_engine(url)
        create_sample_collections(engine)
        engine.dispose()
        return url

    def env(self, url: str, **settings: str) -> dict[str, str]:
        return {**os.environ, "MEDIA_USAGE_DATABASE_URL": url,
                "MEDIA_USAGE_BROKER_URL": self.redis.url, "PYTHONUNBUFFERED": "1",
                **settings}  # fmt: skip

    def flush_redis(self) -> None:
        redis.Redis.from_url(self.redis.url).flushall()

    def spawn(self, argv: list[str], env: dict[str, str], name: str) -> subprocess.Popen:
        """A process in its own session (killed with its children), logging to a file."""
        self.spawned += 1
        log = self.tmp / f"{name}-{self.spawned}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip
        proc.log = log  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def celery(self, app: str, args: list[str], env: dict[str, str]) -> subprocess.Popen:
        return self.spawn([sys.executable, "-m", "celery", "-A", app, *args], env, args[0])

    def worker(self, app: str, queue: str, concurrency: int, env: dict[str, str]):
        proc = self.celery(app, ["worker", "-Q", queue, "-c", str(concurrency), "-l", "info",
                                 "--without-heartbeat", "--without-gossip", "--without-mingle"],
                           env)  # fmt: skip
        wait_for_log(proc, b" ready.")
        return proc

    def stop(self, proc: subprocess.Popen) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in list(self.procs):
            self.stop(proc)


def fill(url: str, entries: int, seed: int = 1) -> None:
    """Write sample entries by plain SQL; the capture triggers enqueue one work row each."""
    engine = create_engine(url)
    for start in range(0, entries, 1000):
        write_entries(engine, sample_entries(min(1000, entries - start), start=start, seed=seed))
    engine.dispose()


def wait_for_log(proc: subprocess.Popen, marker: bytes, timeout: float = 60) -> None:
    """Wait until a process started by ``Bench.spawn`` has written ``marker`` to its log."""
    log: Path = proc.log  # type: ignore[attr-defined]
    deadline = time.monotonic() + timeout
    while marker not in log.read_bytes():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"{proc.args[:4]} did not start; see {log}")
        time.sleep(0.05)  # polling a log another process writes


def wait_until(predicate, timeout: float, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark did not finish in time")
        time.sleep(interval)  # polling state other processes change


def work_left(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM _emdash_media_usage_work")).scalar_one()


def busy_core_seconds() -> float:
    """CPU time the whole machine spent busy since boot (/proc/stat; not idle, not iowait)."""
    with open("/proc/stat") as stat:
        ticks = [int(x) for x in stat.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def use_in_process(url: str, broker_url: str) -> None:
    """Point this process's tasks (tick, fast path) at ``url`` and the bench's Redis."""
    from media_usage_worker.tasks import app, ledger

    os.environ["MEDIA_USAGE_DATABASE_URL"] = url
    os.environ["MEDIA_USAGE_BROKER_URL"] = broker_url
    if app.conf.broker_url != broker_url:
        # Before the app's first publish (its pools are made lazily), like the test fixtures.
        app.conf.broker_url = broker_url
        ledger.forget_all()
