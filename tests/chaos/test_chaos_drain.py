"""Drain under fire: workers SIGKILLed every 2 s, Redis flushed and restarted, PostgreSQL
restarted, while a host application keeps writing. Nothing may be lost and no stale holder may
ever write. Bounded (about 45 s per dialect at 1,500 entries) so it runs in CI;
``MEDIA_USAGE_CHAOS_ENTRIES=3000`` doubles the writing phase.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest
import redis

from media_usage_worker.pipeline.capture import activate
from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.sample_content import create_sample_collections
from tests.chaos import audit
from tests.chaos.pipeline import quiet, work_by_state
from tests.chaos.writer import ContentWriter
from tests.index_oracle import actual_index, expected_index
from tests.processes import wait_for

ENTRIES = int(os.environ.get("MEDIA_USAGE_CHAOS_ENTRIES", "1500"))
KILL_EVERY = 2.0
QUIESCE_DEADLINE = 240


@pytest.mark.timeout(600)
def test_chaos_drain_loses_nothing_and_fences_every_stale_holder(
    dialect: str, chaos_database, chaos_redis, fleet, tmp_path: Path
) -> None:
    url, postgres = chaos_database
    workers = 3 if postgres else 2
    engine = create_engine(url)
    create_sample_collections(engine)
    activate(engine)
    audit.install(engine)

    pool = [fleet.worker(concurrency=1) for _ in range(workers)]
    fleet.beat()
    # The (empty) collections' first reconciliation ends before the writes start, as it would
    # in production; from then on incremental work alone keeps coverage complete.
    wait_for(lambda: quiet(engine), timeout=120, interval=0.5)
    writer = ContentWriter(url, ENTRIES, per_second=20)
    rng = random.Random(3)
    events = {"flushall": 0, "redis_restart": 0, "postgres_restart": 0}
    kills = 0
    started = time.monotonic()
    writer.start()
    while writer.is_alive():
        writer.join(timeout=KILL_EVERY)
        elapsed = time.monotonic() - started
        victim = rng.randrange(len(pool))
        fleet.kill(pool[victim])
        pool[victim] = fleet.worker(concurrency=1)
        kills += 1
        # Each disruption once, early enough that even the CI-sized run sees all of them.
        if elapsed > 5 and not events["flushall"]:
            redis.Redis.from_url(chaos_redis.url).flushall()
            events["flushall"] = 1
        elif elapsed > 10 and not events["redis_restart"]:
            chaos_redis.restart()
            events["redis_restart"] = 1
        elif elapsed > 15 and postgres and not events["postgres_restart"]:
            postgres.restart()
            events["postgres_restart"] = 1
    assert writer.error is None, writer.error
    writing = time.monotonic() - started

    stopped = time.monotonic()
    wait_for(lambda: quiet(engine), timeout=QUIESCE_DEADLINE, interval=1)
    quiesce = time.monotonic() - stopped

    left = work_by_state(engine)
    report = audit.check(engine, tolerance_ms=50 if postgres else 0)
    expected = expected_index(engine)
    actual = actual_index(engine)
    figures = {
        "dialect": dialect, "entries_created": writer.created, "edits": writer.edited,
        "drafts": writer.drafted, "deletes": writer.deleted,
        "writes_failed_during_restarts": writer.failed, "workers": workers,
        "worker_kills": kills, **events, "writing_seconds": round(writing, 1),
        "claims": report.claims, "completions": report.completions,
        "index_writes": report.writes, "stale_writes": len(report.stale),
        "lost": len(expected ^ actual), "work_left": left,
        "seconds_to_quiesce": round(quiesce, 1),
    }  # fmt: skip
    print("chaos figures:", json.dumps(figures))
    (tmp_path / "figures.json").write_text(json.dumps(figures, indent=2))
    assert left == {}, left  # not even failed rows: nothing in this run has a reason to fail
    assert report.stale == [], report.stale[:10]
    assert expected == actual
    assert report.completions >= writer.created  # every entry was processed at least once
    assert kills >= 10 and events["flushall"] and events["redis_restart"]
    assert events["postgres_restart"] or not postgres
    engine.dispose()
