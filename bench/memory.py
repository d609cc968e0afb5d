"""Worker memory: the RSS of the pool process that runs the items, before and after N items."""

from __future__ import annotations

import time

import psutil

from bench.env import Bench, fill, wait_until, work_left
from media_usage_worker.repository.base.db import create_engine

WARMUP = 1000


def _rss_mib(worker_pid: int) -> float:
    children = psutil.Process(worker_pid).children()
    return sum(c.memory_info().rss for c in children) / 2**20


def run(bench: Bench, items: int) -> list[str]:
    url = bench.database("postgresql")
    fill(url, items)
    env = bench.env(url, MEDIA_USAGE_TICK_SECONDS="1")
    engine = create_engine(url)

    bench.celery("tasks", ["beat", "-s", str(bench.tmp / f"beat-{time.time()}")], env)
    worker = bench.worker("tasks", "media_usage", 1, env)
    wait_until(lambda: work_left(engine) <= items - WARMUP, timeout=3600, interval=0.2)
    before = _rss_mib(worker.pid)
    wait_until(lambda: work_left(engine) == 0, timeout=36000, interval=1)
    after = _rss_mib(worker.pid)
    bench.stop_all()
    engine.dispose()
    growth = (after - before) / before * 100
    return [f"worker RSS after {WARMUP:,} items {before:.1f} MiB, after {items:,} items "
            f"{after:.1f} MiB: growth {growth:+.1f} %"]  # fmt: skip
