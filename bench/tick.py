"""Tick cost against the size of the work table (about 1 % of rows due)."""

from __future__ import annotations

import os
import time

import sqlalchemy as sa

from bench.env import Bench, use_in_process
from bench.stats import Figure, ratios
from media_usage_worker.domain.vocabulary import DUE_STATES
from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.repository.work_queue.work_processing import due_query

# 1 % pending and due; the rest waits: retries due in an hour, live leases, failed rows.
FILL = """
INSERT INTO _emdash_media_usage_work (collection_id, collection_slug, content_id, change_epoch,
    work_version, state, attempt_count, next_attempt_at, lease_token, lease_expires_at)
SELECT c.id, c.slug, 'w' || lpad(g::text, 8, '0'), 1, 1,
       CASE WHEN g % 100 = 0 THEN 'pending' WHEN g % 3 = 0 THEN 'leased'
            WHEN g % 3 = 1 THEN 'retry' ELSE 'failed' END,
       0,
       CASE WHEN g % 100 = 0 THEN '2000-01-01T00:00:00.000Z' ELSE '2999-01-01T00:00:00.000Z' END,
       CASE WHEN g % 100 <> 0 AND g % 3 = 0 THEN 't' || g END,
       CASE WHEN g % 100 <> 0 AND g % 3 = 0 THEN '2999-01-01T00:00:00.000Z' END
FROM generate_series(1, :rows) AS g, _emdash_collections AS c WHERE c.slug = 'articles'
"""


def _prepare(bench: Bench, rows: int) -> str:
    url = bench.database("postgresql")
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(FILL), {"rows": rows})
        conn.exec_driver_sql("ANALYZE _emdash_media_usage_work")
    engine.dispose()
    return url


def _one_tick(bench: Bench, url: str) -> float:
    from media_usage_worker.tasks.work import tick

    bench.flush_redis()  # empty queue and ledger: every tick dispatches the same amount
    use_in_process(url, bench.redis.url)
    started = time.perf_counter()
    summary = tick()
    elapsed = (time.perf_counter() - started) * 1000
    assert summary["active"], summary
    return elapsed


def explain(url: str) -> list[str]:
    """PostgreSQL's plans for the tick's due-page queries."""
    engine = create_engine(url)
    lines = []
    with engine.connect() as conn:
        for state in DUE_STATES:
            query = due_query(state, 100)
            compiled = query.compile(dialect=engine.dialect)
            plan = conn.exec_driver_sql("EXPLAIN " + compiled.string, compiled.params).all()
            lines.append(f"-- due page, state {state}:")
            lines += [f"   {row[0]}" for row in plan]
    engine.dispose()
    return lines


def run(bench: Bench, sizes: tuple[int, ...], repeat: int) -> list[str]:
    urls = {rows: _prepare(bench, rows) for rows in sizes}
    lines = []
    for budget in ("10", "1000"):
        os.environ["MEDIA_USAGE_TICK_BUDGET"] = budget
        samples: dict[int, list[float]] = {rows: [] for rows in sizes}
        for _ in range(repeat):
            for rows in sizes:  # alternating sizes, so drift hits all alike
                samples[rows].append(_one_tick(bench, urls[rows]))
        for rows in sizes:
            lines.append(Figure(f"tick, {rows:,} rows, budget {budget}", tuple(samples[rows]),
                                "ms").line())  # fmt: skip
        big, small = max(sizes), min(sizes)
        ratio = tuple(ratios(samples[big], samples[small]))
        lines.append(Figure(f"tick {big:,}/{small:,}, budget {budget}", ratio, "").line())
    os.environ.pop("MEDIA_USAGE_TICK_BUDGET")
    return lines + explain(urls[max(sizes)])
