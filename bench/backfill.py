"""``python -m bench backfill``: activation over entries written before it, to ``complete``.

A site turns the index on over the content it already has: the entries are written while
capture is off, then ``activate`` runs with a worker and beat at their default intervals, and
the reconciliation feeds every entry to the workers. Measured: entries/s from activation to
coverage ``complete`` on every collection, and the time from the last work item's completion
to ``complete`` (the phases after the scan). Beside it, in the same run, (e) the single-process
rebuild of the same entries (``bench.rebuild``).
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from bench.env import Bench, fill
from bench.rebuild import rebuild
from bench.stats import Figure, alternate
from media_usage_worker.repository.activation import activate
from media_usage_worker.repository.db import create_engine
from media_usage_worker.repository.status import overview


def _site_before_activation(bench: Bench, dialect: str, entries: int) -> str:
    url = bench.inactive_database(dialect)
    fill(url, entries)  # no capture yet: nothing is queued
    return url


def activation(bench: Bench, dialect: str, entries: int, workers: int) -> tuple[float, float]:
    """(entries/s from activation to ``complete``, seconds from the work table's last
    emptying to ``complete``)."""
    url = _site_before_activation(bench, dialect, entries)
    bench.flush_redis()
    env = bench.env(url)  # the default tick and reconciliation intervals
    engine = create_engine(url)
    beat = bench.celery("tasks", ["beat", "-s", str(bench.tmp / f"beat-{time.time()}")], env)
    worker = bench.worker("tasks", "media_usage", workers, env)
    started = time.monotonic()
    activate(engine)
    work_seen_empty_at = started
    deadline = started + 3600
    while True:
        with engine.connect() as conn:
            left = conn.execute(sa.text("SELECT count(*) FROM _emdash_media_usage_work"))
            if left.scalar_one():
                work_seen_empty_at = None  # type: ignore[assignment]
            elif work_seen_empty_at is None:
                work_seen_empty_at = time.monotonic()
        _, _, details = overview(engine)
        if details and all(d.coverage == "complete" for d in details):
            break
        if time.monotonic() > deadline:
            raise TimeoutError("the backfill did not complete within an hour")
        time.sleep(0.1)  # polling what other processes change
    done = time.monotonic()
    bench.stop(beat)
    bench.stop(worker)
    engine.dispose()
    tail = done - (work_seen_empty_at or done)
    return entries / (done - started), tail


def run(bench: Bench, entries: int, repeat: int, workers: int) -> list[str]:
    lines = []
    for dialect in ("postgresql", "sqlite"):
        tails: list[float] = []

        def backfill(dialect: str = dialect, tails: list[float] = tails) -> float:
            rate, tail = activation(bench, dialect, entries, workers)
            tails.append(tail)
            return rate

        pipeline, single = alternate(
            repeat, backfill, lambda dialect=dialect: rebuild(bench, dialect, entries)
        )
        name = f"backfill {'PG' if dialect == 'postgresql' else 'SQLite'} {entries:,}"
        lines += [
            Figure(f"{name} activation -> complete", tuple(pipeline), "entries/s").line(),
            Figure(f"{name} (e) single-process rebuild", tuple(single), "entries/s").line(),
            Figure(f"{name} last item -> complete", tuple(tails), "s").line(),
            Figure(
                f"{name} backfill/(e)",
                tuple(p / s for p, s in zip(pipeline, single, strict=True)),
                "",
            ).line(),
        ]
    return lines
