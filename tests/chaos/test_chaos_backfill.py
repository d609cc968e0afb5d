"""A backfill under fire, with large claims: entries written before activation are reconciled in
claims of up to 1,000 items while a worker is SIGKILLed every 1.5 s, Redis is flushed and
restarted, and a host keeps writing. The writer never stops before the reconciliation has
ended: it must end while the site writes. Nothing may be lost, no stale holder may write, and
coverage must end ``complete`` with the index equal to a fresh extraction.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest
import redis

from media_usage_worker.domain.sample_content import sample_entries
from media_usage_worker.pipeline.capture import activate
from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.sample_content import (
    create_sample_collections,
    write_entries,
)
from tests.chaos import audit
from tests.chaos.pipeline import quiet, reconciled, work_by_state
from tests.chaos.writer import ContentWriter
from tests.index_oracle import actual_index, expected_index
from tests.processes import wait_for

ENTRIES = int(os.environ.get("MEDIA_USAGE_CHAOS_BACKFILL_ENTRIES", "12000"))
KILL_EVERY = 1.5
# Disruptions go on this long (the backfill takes longer even undisturbed), then it finishes.
CHAOS_SECONDS = 15
DEADLINE = 300


@pytest.mark.timeout(600)
def test_a_backfill_in_large_claims_loses_nothing_under_kills_and_flushes(
    dialect: str, chaos_database, chaos_redis, fleet, tmp_path: Path
) -> None:
    url, postgres = chaos_database
    engine = create_engine(url)
    create_sample_collections(engine)
    for start in range(0, ENTRIES, 1000):  # capture is off: nothing is queued
        write_entries(engine, sample_entries(min(1000, ENTRIES - start), start=start, seed=5))
    audit.install(engine)
    fleet.env["MEDIA_USAGE_BATCH_SIZE"] = "1000"
    pool = [fleet.worker(concurrency=1) for _ in range(2)]
    fleet.beat()
    activate(engine)
    # Stopped below, never done; its entries are numbered after those written before.
    writer = ContentWriter(url, 10**6, per_second=10, seed=8, first=ENTRIES)
    writer.start()
    rng = random.Random(5)
    events = {"flushall": 0, "redis_restart": 0}
    kills = 0
    started = time.monotonic()
    while not reconciled(engine) and time.monotonic() - started < CHAOS_SECONDS:
        time.sleep(KILL_EVERY)  # the pace of the disruptions, not a synchronisation
        if reconciled(engine):
            break
        victim = rng.randrange(len(pool))
        fleet.kill(pool[victim])
        pool[victim] = fleet.worker(concurrency=1)
        kills += 1
        elapsed = time.monotonic() - started
        if elapsed > 2 and not events["flushall"]:
            redis.Redis.from_url(chaos_redis.url).flushall()
            events["flushall"] = 1
        elif elapsed > 4 and not events["redis_restart"]:
            chaos_redis.restart()
            events["redis_restart"] = 1
    wait_for(lambda: reconciled(engine), timeout=DEADLINE, interval=0.2)
    assert writer.is_alive() and writer.error is None, "the writer stopped before the end"
    writer.stop.set()
    writer.join(timeout=60)
    assert writer.error is None, writer.error
    wait_for(lambda: quiet(engine), timeout=DEADLINE, interval=0.5)

    left = work_by_state(engine)
    report = audit.check(engine, tolerance_ms=50 if postgres else 0)
    expected, actual = expected_index(engine), actual_index(engine)
    figures = {
        "dialect": dialect, "entries_before_activation": ENTRIES,
        "entries_written_during": writer.created, "edits": writer.edited,
        "drafts": writer.drafted, "deletes": writer.deleted,
        "writes_failed_during_restarts": writer.failed, "worker_kills": kills, **events,
        "seconds": round(time.monotonic() - started, 1), "claims": report.claims,
        "index_writes": report.writes, "stale_writes": len(report.stale),
        "mismatches": len(expected ^ actual), "work_left": left,
    }  # fmt: skip
    print("chaos backfill figures:", json.dumps(figures))
    (tmp_path / "figures.json").write_text(json.dumps(figures, indent=2))
    # The site really wrote during the backfill: new entries, edits, drafts and deletes.
    assert writer.created >= 100 and writer.edited and writer.deleted, figures
    assert writer.failed <= 5, figures  # only while Redis restarts, never on the database
    assert left == {}, left
    assert report.stale == [], report.stale[:10]
    assert expected == actual
    # The disruptions hit the backfill itself: 12,000 entries take longer than the 4 s after
    # which both Redis events have happened, and than three kills.
    assert events["flushall"] and events["redis_restart"] and kills >= 3, figures
    engine.dispose()
