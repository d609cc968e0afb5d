"""Drain throughput: (a) this pipeline against (b) plain Celery doing the same refresh."""

from __future__ import annotations

import time

import redis
import sqlalchemy as sa
from celery import Celery

from bench.env import Bench, fill, wait_until, work_left
from bench.stats import Figure, alternate
from repository.db import create_engine


def pipeline(bench: Bench, dialect: str, entries: int, workers: int) -> float:
    """Items/s from the worker being ready to the work table being empty (beat ticking)."""
    url = bench.database(dialect)
    fill(url, entries)
    bench.flush_redis()
    env = bench.env(url, MEDIA_USAGE_TICK_SECONDS="1")
    engine = create_engine(url)
    # Beat first, so its first tick waits in the queue; both sides time from "worker ready".
    beat = bench.celery("tasks", ["beat", "-s", str(bench.tmp / f"beat-{time.time()}")], env)
    worker = bench.worker("tasks", "media_usage", workers, env)
    started = time.monotonic()
    wait_until(lambda: work_left(engine) == 0, timeout=3600, interval=0.1)
    elapsed = time.monotonic() - started
    bench.stop(beat)
    bench.stop(worker)
    engine.dispose()
    return entries / elapsed


def plain_celery(bench: Bench, dialect: str, entries: int, workers: int) -> float:
    """Items/s of ``bench.refresh`` messages, one per entry, published before the clock starts."""
    from bench import baseline_app

    url = bench.database(dialect)
    fill(url, entries)
    bench.flush_redis()
    engine = create_engine(url)
    with engine.connect() as conn:
        items = conn.execute(sa.text(
            "SELECT collection_id, collection_slug, content_id FROM _emdash_media_usage_work"
        )).all()  # fmt: skip
        conn.execute(sa.text("DELETE FROM _emdash_media_usage_work"))
        conn.commit()
    engine.dispose()
    publisher = Celery("bench_publisher", broker=bench.redis.url, set_as_current=False)
    publisher.conf.update(task_serializer="json", accept_content=["json"])
    with publisher.producer_or_acquire() as producer:
        for item in items:
            publisher.send_task("bench.refresh", args=tuple(item), queue=baseline_app.QUEUE,
                                producer=producer)  # fmt: skip
    publisher.close()
    counter = redis.Redis.from_url(bench.redis.url)
    env = bench.env(url)
    worker = bench.worker("bench.baseline_app", baseline_app.QUEUE, workers, env)
    started = time.monotonic()
    wait_until(lambda: int(counter.get("bench:done") or 0) >= entries, timeout=3600, interval=0.1)
    elapsed = time.monotonic() - started
    bench.stop(worker)
    return entries / elapsed


def run(bench: Bench, entries: int, repeat: int, worker_counts=(2, 4)) -> list[str]:
    lines = []
    for workers in worker_counts:
        a, b, ratio = alternate(
            repeat,
            lambda w=workers: pipeline(bench, "postgresql", entries, w),
            lambda w=workers: plain_celery(bench, "postgresql", entries, w),
        )
        lines += [
            Figure(f"drain PG {workers} workers (a) pipeline", tuple(a), "items/s").line(),
            Figure(f"drain PG {workers} workers (b) plain Celery", tuple(b), "items/s").line(),
            Figure(f"drain PG {workers} workers a/b", tuple(ratio), "").line(),
        ]
    return lines


def run_sqlite(bench: Bench, entries: int, repeat: int) -> list[str]:
    values = tuple(pipeline(bench, "sqlite", entries, 2) for _ in range(repeat))
    return [Figure("drain SQLite 2 workers (a) pipeline", values, "items/s").line()]
