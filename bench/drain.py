"""Drain throughput: (a) this pipeline item by item and (d) in batches, against (e) a
single-process rebuild, (b) plain Celery and (c) procrastinate doing the same refresh."""

from __future__ import annotations

import sys
import time

import redis
import sqlalchemy as sa
from celery import Celery

from bench.env import Bench, busy_core_seconds, fill, wait_for_log, wait_until, work_left
from bench.rebuild import rebuild
from bench.stats import Figure, alternate, ratios
from media_usage_worker.repository.base.db import create_engine

# (a): every due item goes as a message of its own, as before batches existed.
ONE_BY_ONE = {"MEDIA_USAGE_BATCH_THRESHOLD": "1000000"}


def pipeline(
    bench: Bench,
    dialect: str,
    entries: int,
    workers: int,
    *,
    batched: bool = True,
    cpu: dict[str, float] | None = None,
) -> float:
    """Items/s from the worker being ready to the work table being empty (beat ticking);
    with ``cpu``, also the machine's busy core-seconds over that time."""
    url = bench.database(dialect)
    fill(url, entries)
    bench.flush_redis()
    env = bench.env(url, MEDIA_USAGE_TICK_SECONDS="1", **({} if batched else ONE_BY_ONE))
    engine = create_engine(url)
    # Beat first, so its first tick waits in the queue; both sides time from "worker ready".
    beat = bench.celery("tasks", ["beat", "-s", str(bench.tmp / f"beat-{time.time()}")], env)
    worker = bench.worker("tasks", "media_usage", workers, env)
    started, busy = time.monotonic(), busy_core_seconds()
    wait_until(lambda: work_left(engine) == 0, timeout=3600, interval=0.1)
    elapsed = time.monotonic() - started
    if cpu is not None:
        cpu["busy_core_seconds"] = busy_core_seconds() - busy
    bench.stop(beat)
    bench.stop(worker)
    engine.dispose()
    return entries / elapsed


def _take_work_items(url: str, entries: int) -> list[tuple[str, str, str]]:
    """Fill the database, then take its work rows away: the baselines get the items directly."""
    fill(url, entries)
    engine = create_engine(url)
    with engine.connect() as conn:
        items = conn.execute(sa.text(
            "SELECT collection_id, collection_slug, content_id FROM _emdash_media_usage_work"
        )).all()  # fmt: skip
        conn.execute(sa.text("DELETE FROM _emdash_media_usage_work"))
        conn.commit()
    engine.dispose()
    return [tuple(item) for item in items]


def plain_celery(bench: Bench, dialect: str, entries: int, workers: int) -> float:
    """Items/s of ``bench.refresh`` messages, one per entry, published before the clock starts."""
    from bench import baseline_app

    url = bench.database(dialect)
    items = _take_work_items(url, entries)
    bench.flush_redis()
    publisher = Celery("bench_publisher", broker=bench.redis.url, set_as_current=False)
    publisher.conf.update(task_serializer="json", accept_content=["json"])
    with publisher.producer_or_acquire() as producer:
        for item in items:
            publisher.send_task("bench.refresh", args=item, queue=baseline_app.QUEUE,
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


def procrastinate_jobs(bench: Bench, dialect: str, entries: int, workers: int) -> float:
    """Items/s of procrastinate jobs, one per entry, deferred before the clock starts."""
    from bench import procrastinate_app

    url = bench.database(dialect)
    items = _take_work_items(url, entries)
    app = procrastinate_app.make_app(url)
    with app.open():
        app.schema_manager.apply_schema()
        task = app.tasks[procrastinate_app.TASK]
        jobs = [dict(zip(("collection_id", "collection_slug", "content_id"), item, strict=True))
                for item in items]  # fmt: skip
        for start in range(0, len(jobs), 1000):
            task.batch_defer(*jobs[start : start + 1000])
    env = bench.env(url)
    argv = [sys.executable, "-m", "procrastinate", "--log-level=info",  # as celery -l info
            "--app=bench.procrastinate_app.app", "worker",
            f"--queues={procrastinate_app.QUEUE}", "--concurrency=1"]  # fmt: skip
    procs = [bench.spawn(argv, env, "procrastinate") for _ in range(workers)]
    for proc in procs:
        wait_for_log(proc, b"Starting worker")
    engine = create_engine(url)
    started = time.monotonic()
    wait_until(lambda: _jobs_ended(engine) >= entries, timeout=3600, interval=0.1)
    elapsed = time.monotonic() - started
    for proc in procs:
        bench.stop(proc)
    with engine.connect() as conn:
        failed = conn.execute(sa.text(
            "SELECT count(*) FROM procrastinate_jobs WHERE status <> 'succeeded'"
        )).scalar_one()  # fmt: skip
    engine.dispose()
    if failed:
        raise RuntimeError(f"{failed} procrastinate jobs did not succeed; see {procs[0].log}")  # type: ignore[attr-defined]
    return entries / elapsed


def _jobs_ended(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text(
            "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('succeeded', 'failed')"
        )).scalar_one()  # fmt: skip


def run(
    bench: Bench, entries: int, repeat: int, worker_counts=(2, 4), with_procrastinate=True
) -> list[str]:
    lines = []
    for workers in worker_counts:
        sides = [
            lambda w=workers: pipeline(bench, "postgresql", entries, w, batched=False),
            lambda w=workers: pipeline(bench, "postgresql", entries, w),
            # One process whatever the worker count; measured in each round all the same, so
            # d/e pairs figures taken side by side.
            lambda: rebuild(bench, "postgresql", entries),
            lambda w=workers: plain_celery(bench, "postgresql", entries, w),
        ]
        if with_procrastinate:
            sides.append(lambda w=workers: procrastinate_jobs(bench, "postgresql", entries, w))
        a, d, e, b, *c = alternate(repeat, *sides)
        name = f"drain PG {workers} workers"
        lines += [
            Figure(f"{name} (a) pipeline, item by item", tuple(a), "items/s").line(),
            Figure(f"{name} (d) pipeline, batches", tuple(d), "items/s").line(),
            Figure(f"{name} (e) single-process rebuild", tuple(e), "items/s").line(),
            Figure(f"{name} (b) plain Celery", tuple(b), "items/s").line(),
            Figure(f"{name} d/a", tuple(ratios(d, a)), "").line(),
            Figure(f"{name} d/e", tuple(ratios(d, e)), "").line(),
            Figure(f"{name} d/b", tuple(ratios(d, b)), "").line(),
            Figure(f"{name} a/b", tuple(ratios(a, b)), "").line(),
        ]
        if c:
            lines += [
                Figure(f"{name} (c) procrastinate", tuple(c[0]), "items/s").line(),
                Figure(f"{name} a/c", tuple(ratios(a, c[0])), "").line(),
                # Same refresh on both sides: Celery's delivery against procrastinate's.
                Figure(f"{name} b/c", tuple(ratios(b, c[0])), "").line(),
            ]
    return lines


def run_sqlite(bench: Bench, entries: int, repeat: int) -> list[str]:
    values = tuple(pipeline(bench, "sqlite", entries, 2) for _ in range(repeat))
    return [Figure("drain SQLite 2 workers (d) pipeline, batches", values, "items/s").line()]
