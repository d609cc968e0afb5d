"""Latency from a content write (plain SQL) to the entry's index being updated."""

from __future__ import annotations

import threading
import time

import sqlalchemy as sa

from bench.env import Bench, fill, use_in_process, wait_until, work_left
from bench.stats import percentile
from media_usage_worker.domain.sample_content import sample_entries
from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.sample_content import write_entries

ENTRIES = 2000  # entries in the database; half measured, half background load
BACKLOG = 20_000  # entries written at once for the backlog mode
WRITE = "UPDATE ec_articles SET hero = :m, version = version + 1 WHERE id = :id RETURNING version"
INDEXED = sa.text(
    "SELECT content_id, source_version FROM _emdash_media_usage_sources "
    "WHERE source_variant = 'columns' AND content_id IN :ids"
).bindparams(sa.bindparam("ids", expanding=True))


def _background(url: str, ids: list[str], per_second: float, stop: threading.Event) -> None:
    engine = create_engine(url)
    n = 0
    while not stop.wait(1 / per_second):
        with engine.begin() as conn:
            conn.execute(sa.text(WRITE), {"m": f"media-{n % 500:04d}", "id": ids[n % len(ids)]})
        n += 1
    engine.dispose()


def _samples(url: str, ids: list[str], fast_path: bool, count: int, every: float) -> list[float]:
    from media_usage_worker.tasks.dispatch import after_write

    engine = create_engine(url)
    pending: dict[str, tuple[float, int]] = {}
    latencies: list[float] = []
    next_write = time.perf_counter()
    deadline = time.monotonic() + count * every + 60
    written = 0
    with engine.connect() as conn:
        while (written < count or pending) and time.monotonic() < deadline:
            now = time.perf_counter()
            if written < count and now >= next_write:
                content_id = ids[written]
                started = time.perf_counter()
                with conn.begin():
                    # A value never used before, so the projection really changes.
                    value = f"media-latency-{fast_path}-{written}-{time.time_ns()}"
                    version = conn.execute(sa.text(WRITE), {"m": value, "id": content_id})
                    expected = version.scalar_one()
                if fast_path:
                    after_write("articles", content_id)
                pending[content_id] = (started, expected)
                written += 1
                next_write += every
            if pending:
                rows = conn.execute(INDEXED, {"ids": list(pending)}).all()
                conn.rollback()
                seen = time.perf_counter()
                for content_id, version in rows:
                    if content_id in pending and (version or 0) >= pending[content_id][1]:
                        latencies.append((seen - pending.pop(content_id)[0]) * 1000)
            time.sleep(0.005)  # the poll interval bounds the measurement's resolution
    if pending:
        raise TimeoutError(f"{len(pending)} writes were never indexed: {sorted(pending)[:5]}")
    engine.dispose()
    return latencies


def run(bench: Bench, capacity: float, count: int) -> list[str]:
    url = bench.database("postgresql")
    fill(url, ENTRIES)
    use_in_process(url, bench.redis.url)
    env = bench.env(url)  # production defaults: 5 s tick
    engine = create_engine(url)
    bench.celery("tasks", ["beat", "-s", str(bench.tmp / f"beat-{time.time()}")], env)
    bench.worker("tasks", "media_usage", 2, env)
    wait_until(lambda: work_left(engine) == 0, timeout=600, interval=0.5)
    with engine.connect() as conn:
        # Published, draft-free entries: their "columns" source is what a write updates.
        ids = list(conn.execute(sa.text(
            "SELECT id FROM ec_articles WHERE status = 'published' AND deleted_at IS NULL "
            "AND draft_revision_id IS NULL ORDER BY id")).scalars())  # fmt: skip
    engine.dispose()
    measured, background = ids[: len(ids) // 2], ids[len(ids) // 2 :]
    lines = [
        f"latency write → index, {count} writes per mode, one every 200 ms (background load "
        f"{capacity / 2:.0f} writes/s = 50 % of {capacity:.0f} items/s)"
    ]
    for load in (False, True):
        stop = threading.Event()
        loader = threading.Thread(target=_background, args=(url, background, capacity / 2, stop))
        if load:
            loader.start()
        for fast in (True, False):
            sample = _samples(url, measured, fast, count, every=0.2)
            measured = measured[count:] + measured[:count]
            p = [percentile(sample, q) for q in (50, 95, 99)]
            mode = f"{'fast path' if fast else 'tick only':<10} {'50% load' if load else 'idle':<9}"
            lines.append(f"  {mode} p50 {p[0]:8.1f} ms  p95 {p[1]:8.1f} ms  p99 {p[2]:8.1f} ms")
        stop.set()
        if load:
            loader.join()
    lines.append(_during_backlog(url, measured, min(count, 100)))
    bench.stop_all()
    return lines


def _during_backlog(url: str, ids: list[str], count: int) -> str:
    """Fast-path latency while a backlog of ``BACKLOG`` new entries drains in batches."""
    engine = create_engine(url)
    for start in range(0, BACKLOG, 1000):
        write_entries(engine, sample_entries(1000, start=ENTRIES + start, seed=3))
    sample = _samples(url, ids, True, count, every=0.1)
    left = work_left(engine)
    engine.dispose()
    p = [percentile(sample, q) for q in (50, 95, 99)]
    return (
        f"  fast path  {BACKLOG:,} backlog p50 {p[0]:8.1f} ms  p95 {p[1]:8.1f} ms  "
        f"p99 {p[2]:8.1f} ms  ({count} writes; {left:,} backlog items still due after)"
    )
