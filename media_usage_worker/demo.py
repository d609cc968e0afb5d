"""``media-usage demo``: the whole pipeline on one machine with nothing but Python installed.

A SQLite database, the sample collections, thousands of entries written by plain SQL (so the
capture triggers queue them), and a real ``celery worker`` plus ``celery beat`` talking through
kombu's ``filesystem://`` transport, which needs no server. It waits until every item is
processed and every collection's coverage is ``complete``, then reports what it measured.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from media_usage_worker.api import CollectionStatus, MediaUsage
from media_usage_worker.domain.sample_content import sample_entries
from media_usage_worker.pipeline.capture import activate, declare_source
from media_usage_worker.pipeline.database import create_engine, upgrade
from media_usage_worker.sample_content import (
    create_sample_collections,
    create_sample_site,
    write_entries,
)

BATCH = 500
# The demo's workers get what one tick may send (the default; docs/operations.md).
TICK_BUDGET = 5000
POLL_SECONDS = 0.5
# How long a warm shutdown may take before the processes are killed.
STOP_SECONDS = 30


@dataclass(frozen=True)
class DemoSummary:
    entries_written: int
    entries_indexed: int
    references: int
    coverage: dict[str, str]
    elapsed_seconds: float
    # Only a run that finished has a rate: one cut short by the timeout did not index its
    # entries in that time, so written / elapsed would claim a speed nobody measured.
    items_per_second: float | None
    finished: bool
    directory: Path
    work_left: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    # The sample site beyond its collections (settings, avatars, a declared menu table): each
    # source's coverage by kind, and its rows in the index.
    sources: dict[str, str] = field(default_factory=dict)
    source_rows_indexed: int = 0

    def environment(self) -> dict[str, str]:
        """The settings that point the CLI, a worker or beat at this demo's database and
        broker: what a user pastes into a shell to go on with it."""
        return {
            "MEDIA_USAGE_DATABASE_URL": f"sqlite:///{self.directory / 'demo.db'}",
            "MEDIA_USAGE_BROKER_URL": "filesystem://",
            "MEDIA_USAGE_BROKER_FOLDER": str(self.directory / "broker"),
        }


def run_demo(
    directory: Path,
    entries: int,
    workers: int = 2,
    timeout: float = 300.0,
    echo: Callable[[str], None] = print,
) -> DemoSummary:
    """Run the pipeline over ``entries`` sample entries; never leaves a process behind."""
    directory.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{directory / 'demo.db'}"
    upgrade(url)
    engine = create_engine(url)
    try:
        slugs = create_sample_collections(engine)
        if (menu := create_sample_site(engine)) is not None:
            declare_source(engine, menu)
        activate(engine)
        env = _task_env(url, directory)
        with _celery(directory, env, workers):
            deadline = time.monotonic() + timeout
            # The new collections are reconciled (empty) first; then writes keep them complete.
            _wait(lambda: _all_complete(engine), deadline)
            started = time.monotonic()
            written = 0
            for batch_start in range(0, entries, BATCH):
                count = min(BATCH, entries - batch_start)
                written += write_entries(engine, sample_entries(count, start=batch_start))
            echo(f"wrote {written} entries by plain SQL; the capture triggers queued them")
            progress = _Progress(engine, written, started, echo)
            finished = _wait(progress.report, deadline)
            elapsed = time.monotonic() - started
        return _summary(engine, directory, written, elapsed, finished, slugs)
    finally:
        engine.dispose()


def _task_env(url: str, directory: Path) -> dict[str, str]:
    return {
        **os.environ,
        "MEDIA_USAGE_DATABASE_URL": url,
        "MEDIA_USAGE_BROKER_URL": "filesystem://",
        "MEDIA_USAGE_BROKER_FOLDER": str(directory / "broker"),
        "MEDIA_USAGE_TICK_SECONDS": "1",
        "MEDIA_USAGE_TICK_BUDGET": str(TICK_BUDGET),
        "MEDIA_USAGE_RECONCILE_SECONDS": "1",
        "MEDIA_USAGE_RECONCILE_DEFER_SECONDS": "1",
        "MEDIA_USAGE_MAX_QUEUED": "200",
        "PYTHONUNBUFFERED": "1",
    }


@contextlib.contextmanager
def _celery(directory: Path, env: dict[str, str], workers: int) -> Iterator[None]:
    worker_args = ["worker", "-Q", "media_usage", "-c", str(workers), "-l", "warning"]
    quiet = ["--without-heartbeat", "--without-gossip", "--without-mingle"]
    beat_args = ["beat", "-s", str(directory / "beat-schedule"), "-l", "warning"]
    procs = [
        _start(directory / "worker.log", [*worker_args, *quiet], env),
        _start(directory / "beat.log", beat_args, env),
    ]
    try:
        yield
    finally:
        for proc in procs:
            _stop(proc)


def _start(log: Path, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "media_usage_worker.tasks", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Celery's warm shutdown: SIGTERM to the main process only, which stops its pool children
    itself (SIGTERM to the whole group killed them under it, and it logged each as an error)."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _wait(done: Callable[[], bool], deadline: float) -> bool:
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(POLL_SECONDS)  # polling a database another process writes
    return done()


def _scopes(engine: sa.Engine) -> list[CollectionStatus]:
    """Every collection's and every source's coverage and work (``media-usage status``)."""
    status = MediaUsage(engine).status()
    return status.collections + status.sources


def _all_complete(engine: sa.Engine) -> bool:
    return _done(_scopes(engine))


def _done(details: list[CollectionStatus]) -> bool:
    """No work left and every collection's coverage complete."""
    return all(d.coverage == "complete" and not any(d.work.values()) for d in details)


@dataclass
class _Progress:
    engine: sa.Engine
    written: int
    started: float
    echo: Callable[[str], None]
    last: float = 0.0
    shown: int = -1

    def report(self) -> bool:
        """Print a line about once a second; ``True`` once all is done (one status read)."""
        details = _scopes(self.engine)
        left = sum(sum(d.work.values()) for d in details)
        leased = sum(d.work.get("leased", 0) for d in details)
        now = time.monotonic()
        if now - self.last >= 1 or left == 0:
            self.last = now
            done = self.written - min(left, self.written)
            rate = done / max(now - self.started, 1e-9)
            line = (
                f"  processed {done:>6}/{self.written}  work left {left:>6}  "
                f"leased {leased:>5}  {rate:6.0f} items/s"
            )
            if left and not leased and done == self.shown:
                # Each tick sends at most MEDIA_USAGE_TICK_BUDGET items; the rest wait in the
                # work table, not in the broker, until the next tick (a second here).
                line += f"  (the workers are idle until the next tick sends up to {TICK_BUDGET})"
            self.shown = done
            self.echo(line)
        return _done(details)


def _summary(
    engine: sa.Engine,
    directory: Path,
    written: int,
    elapsed: float,
    finished: bool,
    slugs: list[str],
) -> DemoSummary:
    details = _scopes(engine)
    totals = MediaUsage(engine).indexed_totals()
    return DemoSummary(
        entries_written=written,
        entries_indexed=sum(t.entries for slug, t in totals.items() if slug in slugs),
        references=sum(t.references for t in totals.values()),
        coverage={d.slug: d.coverage for d in details if d.slug in slugs},
        elapsed_seconds=round(elapsed, 1),
        items_per_second=round(written / elapsed, 1) if finished and elapsed else None,
        finished=finished,
        directory=directory,
        work_left=sum(sum(d.work.values()) for d in details),
        failed={d.slug: d.work.get("failed", 0) for d in details if d.work.get("failed")},
        sources={d.kind: d.coverage for d in details if d.kind != "content"},
        source_rows_indexed=sum(t.entries for slug, t in totals.items() if slug not in slugs),
    )
