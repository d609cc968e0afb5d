"""The item path with a batch of one, in one process and without Celery: what one item costs.

``python -m bench single``: ``process_work_item`` over due items taken in random order (a lease
renewal registered, as a worker does), timing every statement by its text. It says how much of
an item is SQL and which statements it spends it on; (a) end to end adds Celery and the tick.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from bench.env import Bench, fill
from bench.stats import Figure
from media_usage_worker.domain.vocabulary import Outcome
from media_usage_worker.pipeline.process import Heartbeat, process_work_item
from media_usage_worker.repository.base.db import create_engine

SHOWN = 8  # statements listed, by total time
_STARTED = "bench_statement_started"


def run(bench: Bench, entries: int, repeat: int, items: int = 1000) -> list[str]:
    rates: list[float] = []
    sql_ms: list[float] = []
    totals: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for _ in range(repeat):
        rate, spent, run_counts = _one_run(bench, entries, items)
        rates.append(rate)
        sql_ms.append(sum(spent.values()) * 1000 / items)
        totals.update(spent)
        counts.update(run_counts)
    done = items * repeat
    lines = [
        Figure("single items in one process, PG", tuple(rates), "items/s").line(),
        Figure("single items in one process, SQL per item", tuple(sql_ms), "ms").line(),
    ]
    for text, seconds in totals.most_common(SHOWN):
        each = seconds * 1000 / counts[text]
        lines.append(f"  {each:6.3f} ms  x{counts[text] / done:4.2f} per item  {text}")
    return lines


def _one_run(bench: Bench, entries: int, items: int) -> tuple[float, Counter[str], Counter[str]]:
    """Items/s over ``items`` due items of a fresh database, and seconds and runs by statement."""
    url = bench.database("postgresql")
    fill(url, entries)
    engine = create_engine(url)
    with engine.connect() as conn:
        due = conn.execute(sa.text(
            "SELECT collection_id, content_id, work_version FROM _emdash_media_usage_work "
            "ORDER BY random() LIMIT :n"
        ), {"n": items}).all()  # fmt: skip
    if len(due) != items:
        raise RuntimeError(f"{items} items asked for, {len(due)} due: write more entries")
    spent: Counter[str] = Counter()
    counts: Counter[str] = Counter()

    def started(conn: sa.Connection, *_: Any) -> None:
        conn.info[_STARTED] = time.perf_counter()

    def ended(conn: sa.Connection, _cursor: Any, statement: str, *_: Any) -> None:
        text = " ".join(statement.split())[:80]
        spent[text] += time.perf_counter() - conn.info[_STARTED]
        counts[text] += 1

    event.listen(engine, "before_cursor_execute", started)
    event.listen(engine, "after_cursor_execute", ended)
    began = time.perf_counter()
    for collection_id, content_id, version in due:
        result = process_work_item(
            engine, collection_id=collection_id, content_id=content_id, work_version=version,
            heartbeat=Heartbeat(every_seconds=100, max_seconds=300),
        )  # fmt: skip
        if result.outcome != Outcome.COMPLETED:
            raise RuntimeError(f"an undisturbed item ended {result.outcome}")
    rate = items / (time.perf_counter() - began)
    engine.dispose()
    return rate, spent, counts
