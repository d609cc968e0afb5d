"""``python -m bench backfill --write-rate R [R ...]``: a backfill while the site keeps writing.

Entries are written while capture is off, then ``media-usage activate`` runs with a worker of
two processes and beat at their default intervals, as in ``bench.backfill``; from the moment of
activation a host writes one new entry every ``1/R`` seconds and sends
``media_usage.after_write`` for it (the fast path), and keeps writing until coverage is
``complete`` everywhere (or the deadline). Measured per rate: activation to the end of the
reconciliation (every collection indexed whole but for queued writes: ``unused`` answers),
activation to ``complete``, the fast-path latency of the writes made meanwhile (commit to the
entry's first index row), and the claims the workers wasted (items whose row moved on while
they held it: ``superseded`` or ``claim_lost`` in the worker's log). The rates run side by
side, alternating, ``repeat`` times.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field

import sqlalchemy as sa

from bench.backfill import _cli
from bench.env import Bench, fill, use_in_process
from bench.stats import percentile
from media_usage_worker.domain.sample_content import sample_entries
from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.sample_content import write_entries

# Longest a run may take before it is reported as not converged.
DEADLINE_SECONDS = 900
_STATUS = sa.text(
    "SELECT count(*), sum(CASE WHEN reconciliation_required = 0 THEN 1 ELSE 0 END), "
    "sum(CASE WHEN status = 'complete' AND reconciliation_required = 0 THEN 1 ELSE 0 END) "
    "FROM _emdash_media_usage_index_status WHERE capture_state = 'active'"
)
_INDEXED = sa.text(
    "SELECT DISTINCT content_id FROM _emdash_media_usage_sources WHERE content_id IN :ids"
).bindparams(sa.bindparam("ids", expanding=True))
_WASTED = re.compile(rb"'(superseded|claim_lost)'")
# Celery's line for each task a worker ran: what a batch and a single item take to run.
_RAN = re.compile(
    rb"Task media_usage\.(process_batch|process_work)\[[^\]]+\] succeeded in ([0-9.]+)s"
)


@dataclass
class Converged:
    rate: float
    baseline: float | None = None  # s, activation -> reconciliation done everywhere
    complete: float | None = None  # s, activation -> coverage complete everywhere
    latencies: list[float] = field(default_factory=list)  # ms, fast path, writes meanwhile
    written: int = 0
    wasted: int = 0
    unindexed: int = 0  # writes never seen indexed before the run ended
    # ms each batch (and each single item) took to run in a worker process
    batch_runs: list[float] = field(default_factory=list)
    item_runs: list[float] = field(default_factory=list)


class Writer(threading.Thread):
    """One new entry every ``1/rate`` s, each followed by ``after_write``; records when each
    was committed and when its first index row was seen."""

    def __init__(self, url: str, rate: float, first: int) -> None:
        super().__init__(daemon=True)
        self.url, self.rate, self.first = url, rate, first
        self.stop = threading.Event()
        self.pending: dict[str, float] = {}
        self.latencies: list[float] = []
        self.written = 0

    def run(self) -> None:
        from media_usage_worker.tasks.dispatch import after_write

        engine = create_engine(self.url)
        next_write = time.perf_counter()
        while not self.stop.is_set():
            now = time.perf_counter()
            if self.rate > 0 and now >= next_write:
                (entry,) = sample_entries(1, start=self.first + self.written, seed=7)
                write_entries(engine, [entry])
                self.pending[entry.row["id"]] = time.perf_counter()
                after_write(entry.collection, entry.row["id"])
                self.written += 1
                next_write += 1 / self.rate
            self._seen(engine)
            self.stop.wait(0.005)  # the poll interval bounds the measurement's resolution
        engine.dispose()

    def _seen(self, engine: sa.Engine) -> None:
        if not self.pending:
            return
        with engine.connect() as conn:
            found = conn.execute(_INDEXED, {"ids": list(self.pending)}).scalars().all()
        seen = time.perf_counter()
        for content_id in found:
            self.latencies.append((seen - self.pending.pop(content_id)) * 1000)


def converge(bench: Bench, dialect: str, entries: int, workers: int, rate: float) -> Converged:
    url = bench.inactive_database(dialect)
    fill(url, entries)
    bench.flush_redis()
    use_in_process(url, bench.redis.url)
    env = bench.env(url)
    engine = create_engine(url)
    bench.celery("tasks", ["beat", "-s", str(bench.tmp / f"beat-{time.time()}")], env)
    worker = bench.worker("tasks", "media_usage", workers, env)
    run = Converged(rate)
    writer = Writer(url, rate, first=entries + 1_000_000)
    started = time.monotonic()
    _cli(env, "activate")
    writer.start()
    while time.monotonic() - started < DEADLINE_SECONDS:
        with engine.connect() as conn:
            scopes, whole, complete = conn.execute(_STATUS).one()
        elapsed = time.monotonic() - started
        if run.baseline is None and scopes and whole == scopes:
            run.baseline = elapsed
        if scopes and complete == scopes:
            run.complete = elapsed
            break
        time.sleep(0.1)  # polling what other processes change
    writer.stop.set()
    writer.join()
    run.latencies, run.written, run.unindexed = (
        writer.latencies,
        writer.written,
        len(writer.pending),
    )
    bench.stop_all()
    log = worker.log.read_bytes()  # type: ignore[attr-defined]
    run.wasted = len(_WASTED.findall(log))
    for task, seconds in _RAN.findall(log):
        runs = run.batch_runs if task == b"process_batch" else run.item_runs
        runs.append(float(seconds) * 1000)
    engine.dispose()
    return run


def _runs(name: str, runs: list[float]) -> str:
    if not runs:
        return f"no {name}"
    p50, p99 = percentile(runs, 50), percentile(runs, 99)
    return f"{len(runs)} {name} p50 {p50:.0f} ms p99 {p99:.0f} ms max {max(runs):.0f} ms"


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:6.1f} s"


def run(
    bench: Bench, entries: int, repeat: int, workers: int, rates: list[float],
    dialects: tuple[str, ...],
) -> list[str]:  # fmt: skip
    lines = [
        f"backfill under writes: {entries:,} entries, one worker of {workers} processes and "
        f"beat, a new entry every 1/R s with the fast path until complete "
        f"(deadline {DEADLINE_SECONDS} s)"
    ]
    for dialect in dialects:
        name = "PG" if dialect == "postgresql" else "SQLite"
        runs: dict[float, list[Converged]] = {rate: [] for rate in rates}
        for _ in range(repeat):
            for rate in rates:  # the rates alternate within each round
                runs[rate].append(converge(bench, dialect, entries, workers, rate))
        quiet = [r.complete for r in runs.get(0.0, []) if r.complete is not None]
        for rate, measured in runs.items():
            for r in measured:
                p = [percentile(r.latencies, q) if r.latencies else 0.0 for q in (50, 95, 99)]
                ratio = (
                    f"{r.complete / min(quiet):4.2f}x quiet"
                    if quiet and r.complete is not None
                    else "  -  "
                )
                lines.append(
                    f"  {name:<6} R={rate:>4g}/s  reconciled {_seconds(r.baseline)}  "
                    f"complete {_seconds(r.complete)} ({ratio})  writes {r.written:5d}  "
                    f"fast path p50 {p[0]:7.1f} p95 {p[1]:7.1f} p99 {p[2]:7.1f} ms  "
                    f"unindexed at end {r.unindexed}  wasted claims {r.wasted}"
                )
                lines.append(f"         worker runs: {_runs('batch', r.batch_runs)}, "
                             f"{_runs('single item', r.item_runs)}")  # fmt: skip
    return lines
