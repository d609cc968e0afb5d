"""``python -m bench backfill``: activation over entries written before it, and a re-index after a
change of extraction rules, each to ``complete``.

A site turns the index on over the content it already has: the entries are written while
capture is off, then ``media-usage activate`` runs (as an operator would) with a worker and
beat at their default intervals, and the reconciliation feeds every entry to the workers. Then
an operator declares a media URL prefix (``media-usage rules add-url-prefix``): a change of
rules, after which every collection is re-indexed the same way. Measured for each: entries/s to
coverage ``complete`` on every collection; for the backfill also the time from the work table's
last emptying to ``complete`` (the phases after the scan), the peak RSS of a worker pool process
(and its RSS once 10,000 entries were indexed) and the database's size. Beside them, in the same
run and alternating with them: (e) the single-process rebuild of the same entries
(``bench.rebuild``) and, when the peer site is built (``../shared/peers/wagtail``), Wagtail's own
``rebuild_references_index`` over as many pages.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import sqlalchemy as sa

from bench.env import ROOT, Bench, fill
from bench.rebuild import rebuild
from bench.stats import Figure, alternate, ratios
from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.repository.reconciling.status import overview

URL_PREFIX = "https://cdn.example.com/media/"
# Where the peer's build script puts its sites (build-and-time.sh N builds site<N> there).
WAGTAIL_DIR = Path(os.environ.get("MEDIA_USAGE_BENCH_WAGTAIL", "/tmp/wagtail-peer"))
RSS_AFTER = 10_000


@dataclass
class Backfill:
    """One run's figures."""

    activation: float = 0.0  # entries/s, activation -> complete
    tail: float = 0.0  # s, the last work row's or key range's end -> complete
    reindex: float = 0.0  # entries/s, rules change -> complete
    peak_rss_mib: float = 0.0  # the largest worker pool process, sampled
    rss_at_10k_mib: float | None = None  # the same, once RSS_AFTER entries were indexed
    database_mib: float = 0.0


def _cli(bench_env: dict[str, str], *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "media_usage_worker", *args], cwd=ROOT, env=bench_env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"media-usage {' '.join(args)} failed: {done.stderr[-2000:]}")


def _pool_rss_mib(worker: subprocess.Popen) -> float:
    """The largest RSS among the worker's pool processes (the ones that run the items)."""
    try:
        children = psutil.Process(worker.pid).children(recursive=True)
        return max((c.memory_info().rss for c in children), default=0) / 2**20
    except psutil.Error:
        return 0.0


def _indexed(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(sa.text("SELECT count(*) FROM _emdash_media_usage_sources")).scalar_one()
        )


# Work rows or key ranges left: the run's entries are not all indexed yet.
_WORK_LEFT = sa.text(
    "SELECT 1 FROM _emdash_media_usage_work UNION ALL "
    "SELECT 1 FROM _media_usage_worker_backfill_ranges LIMIT 1"
)


def _until_complete(engine: sa.Engine, worker: subprocess.Popen, run: Backfill) -> float:
    """Seconds until every collection is ``complete``; samples RSS and the work table meanwhile
    (``run.tail`` is measured from the last emptying of the work rows and key ranges)."""
    started = time.monotonic()
    emptied_at: float | None = started
    deadline = started + 4 * 3600
    while True:
        with engine.connect() as conn:
            left = conn.execute(_WORK_LEFT).first()
        now = time.monotonic()
        if left is not None:
            emptied_at = None
        elif emptied_at is None:
            emptied_at = now
        rss = _pool_rss_mib(worker)
        run.peak_rss_mib = max(run.peak_rss_mib, rss)
        if run.rss_at_10k_mib is None and _indexed(engine) >= RSS_AFTER:
            run.rss_at_10k_mib = rss
        _, _, details = overview(engine)
        if details and all(d.coverage == "complete" for d in details):
            done = time.monotonic()
            run.tail = done - (emptied_at or done)
            return done - started
        if now > deadline:
            raise TimeoutError("not complete within four hours")
        time.sleep(0.1)  # polling what other processes change


def _database_mib(engine: sa.Engine, url: str) -> float:
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            size = conn.execute(sa.text("SELECT pg_database_size(current_database())")).scalar_one()
        return int(size) / 2**20
    path = Path(sa.make_url(url).database or "")
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 2**20


def backfill(
    bench: Bench, dialect: str, entries: int, workers: int, *, reindex: bool = True
) -> Backfill:
    url = bench.inactive_database(dialect)
    fill(url, entries)  # no capture yet: nothing is queued
    bench.flush_redis()
    env = bench.env(url)  # the default tick and reconciliation intervals
    engine = create_engine(url)
    bench.celery("tasks", ["beat", "-s", str(bench.tmp / f"beat-{time.time()}")], env)
    worker = bench.worker("tasks", "media_usage", workers, env)
    run = Backfill()
    started = time.monotonic()
    _cli(env, "activate")
    _until_complete(engine, worker, run)
    run.activation = entries / (time.monotonic() - started)
    run.database_mib = _database_mib(engine, url)
    if reindex:
        changed = time.monotonic()
        _cli(env, "rules", "add-url-prefix", URL_PREFIX)
        again = Backfill()
        _until_complete(engine, worker, again)
        run.reindex = entries / (time.monotonic() - changed)
        run.peak_rss_mib = max(run.peak_rss_mib, again.peak_rss_mib)
    bench.stop_all()
    engine.dispose()
    return run


def wagtail_site(pages: int) -> Path | None:
    """The peer's built site of ``pages`` pages, if ``build-and-time.sh`` built it."""
    site = WAGTAIL_DIR / f"site{pages}"
    ready = (site / "db.sqlite3").is_file() and (WAGTAIL_DIR / "venv/bin/python").is_file()
    return site if ready else None


def wagtail_rebuild(site: Path, pages: int) -> float:
    """Pages/s of Wagtail's ``rebuild_references_index`` over the built site."""
    started = time.monotonic()
    subprocess.run(
        [str(WAGTAIL_DIR / "venv/bin/python"), "manage.py", "rebuild_references_index"],
        cwd=site, check=True, capture_output=True, timeout=3600,
    )  # fmt: skip
    return pages / (time.monotonic() - started)


def run(
    bench: Bench,
    entries: int,
    repeat: int,
    workers: int,
    *,
    dialects: tuple[str, ...] = ("postgresql", "sqlite"),
    only_backfill: bool = False,
) -> list[str]:
    """Every figure side by side; ``only_backfill`` (for a run too long to repeat, such as a
    million entries) measures the activation alone: no re-index, no rebuild, no peer."""
    if only_backfill:
        return _backfill_only(bench, entries, workers, dialects)
    lines = []
    site = wagtail_site(entries)
    if site is None:
        lines.append(
            f"wagtail peer skipped: no site of {entries:,} pages under {WAGTAIL_DIR} "
            f"(../shared/peers/wagtail/build-and-time.sh {entries} builds it)"
        )
    for dialect in dialects:
        runs: list[Backfill] = []

        def ours(dialect: str = dialect, runs: list[Backfill] = runs) -> float:
            runs.append(backfill(bench, dialect, entries, workers))
            return runs[-1].activation

        sides: list[Callable[[], float]] = [ours, lambda d=dialect: rebuild(bench, d, entries)]
        if site is not None:
            sides.append(lambda: wagtail_rebuild(site, entries))
        measured = alternate(repeat, *sides)
        pipeline, single = measured[0], measured[1]
        name = f"backfill {'PG' if dialect == 'postgresql' else 'SQLite'} {entries:,}"
        reindex = [r.reindex for r in runs]
        lines += [
            Figure(f"{name} activation -> complete", tuple(pipeline), "entries/s").line(),
            Figure(f"{name} rules change -> complete", tuple(reindex), "entries/s").line(),
            Figure(f"{name} (e) single-process rebuild", tuple(single), "entries/s").line(),
            Figure(f"{name} last item -> complete", tuple(r.tail for r in runs), "s").line(),
            Figure(f"{name} backfill/(e)", tuple(ratios(pipeline, single)), "").line(),
            Figure(f"{name} re-index/(e)", tuple(ratios(reindex, single)), "").line(),
            Figure(f"{name} peak worker RSS", tuple(r.peak_rss_mib for r in runs), "MiB").line(),
            Figure(f"{name} database size", tuple(r.database_mib for r in runs), "MiB").line(),
        ]
        at_10k = [r.rss_at_10k_mib for r in runs if r.rss_at_10k_mib]
        if at_10k:
            lines.append(Figure(f"{name} worker RSS at 10,000", tuple(at_10k), "MiB").line())
        if site is not None:
            peer = measured[2]
            lines += [
                Figure(f"{name} wagtail rebuild", tuple(peer), "pages/s").line(),
                Figure(f"{name} backfill/wagtail", tuple(ratios(pipeline, peer)), "").line(),
            ]
    return lines


def _backfill_only(
    bench: Bench, entries: int, workers: int, dialects: tuple[str, ...]
) -> list[str]:
    lines = []
    for dialect in dialects:
        started = time.monotonic()
        once = backfill(bench, dialect, entries, workers, reindex=False)
        name = f"backfill {'PG' if dialect == 'postgresql' else 'SQLite'} {entries:,}"
        at_10k = once.rss_at_10k_mib or 0.0
        growth = (once.peak_rss_mib - at_10k) / at_10k * 100 if at_10k else 0.0
        lines.append(
            f"{name}: activation -> complete {entries / once.activation:,.0f} s "
            f"({once.activation:,.0f} entries/s), last item -> complete {once.tail:.2f} s, "
            f"worker RSS {at_10k:.1f} MiB at 10,000 entries, peak {once.peak_rss_mib:.1f} MiB "
            f"({growth:+.1f} %), database {once.database_mib:,.0f} MiB "
            f"(run with setup {time.monotonic() - started:,.0f} s)"
        )
    return lines
