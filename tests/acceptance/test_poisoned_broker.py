"""Forged entries in Redis's ``unacked`` hash: kombu replays that hash when a worker starts and
on a timer, and one entry it cannot decode used to stop every worker from starting. Each is
dropped with one line; the worker starts and works."""

from __future__ import annotations

import redis
import sqlalchemy as sa

from tests.processes import wait_for, work_rows
from tests.support import SAMPLE_FIELDS, active_collection

FORGED = {
    "probe-tag-1": "this is not json",
    "probe-tag-2": "[1, 2]",
    "probe-tag-3": '[{"body": 5}, "", "media_usage"]',
}


def test_a_worker_starts_over_forged_unacked_entries_and_drops_them(
    db: sa.Engine, processes, broker_url: str
) -> None:
    client = redis.Redis.from_url(broker_url)
    for tag, value in FORGED.items():
        client.hset("unacked", tag, value)
        client.zadd("unacked_index", {tag: 1})
    active_collection(db, "posts", SAMPLE_FIELDS)
    with db.begin() as conn:
        for i in range(20):
            conn.execute(
                sa.text("INSERT INTO ec_posts (id, hero) VALUES (:i, :h)"),
                {"i": f"e{i:02d}", "h": f"m{i}"},
            )
    log = processes.next_log("worker")
    processes.worker(concurrency=1)
    processes.beat()

    wait_for(lambda: work_rows(db) == 0, timeout=90, interval=0.5)
    wait_for(lambda: not any(client.hexists("unacked", tag) for tag in FORGED), timeout=60)
    text = log.read_text(errors="replace")
    assert "Unrecoverable error" not in text
    assert text.count("an unacknowledged entry in Redis is not a kombu message") == len(FORGED)
    assert not any(client.zscore("unacked_index", tag) for tag in FORGED)
    client.close()
