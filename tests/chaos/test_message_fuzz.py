"""Thousands of random and malformed envelopes, published with raw kombu and pushed as raw
Redis entries, during a drain through a real worker: the worker never exits, every message that
must be dropped gets exactly one log line, and the index ends exact with no stale write."""

from __future__ import annotations

import json
import random
import re

import pytest
import redis
import sqlalchemy as sa
from kombu import Connection, Producer

from media_usage_worker.domain.sample_content import sample_entries
from media_usage_worker.sample_content import write_entries
from tests.chaos import audit
from tests.chaos.fuzz import forgeries
from tests.chaos.pipeline import quiet, start_audited_pipeline
from tests.index_oracle import actual_index, expected_index
from tests.processes import wait_for, work_rows

QUEUE = "media_usage"
FUZZ = 3000
ENTRIES = 600


def _publish(broker_url: str, cases: list) -> None:
    client = redis.Redis.from_url(broker_url)
    with Connection(broker_url) as conn:
        producer = Producer(conn.default_channel)
        for case in cases:
            if case.raw_entry is not None:
                client.lpush(QUEUE, case.raw_entry)
                continue
            body = case.body.encode() if isinstance(case.body, str) else case.body
            producer.publish(body, routing_key=QUEUE, headers=case.headers,
                             content_type=case.content_type,
                             content_encoding=case.content_encoding)  # fmt: skip
    client.close()


@pytest.mark.timeout(600)
def test_malformed_messages_are_dropped_one_line_each_and_the_drain_stays_exact(
    dialect: str, chaos_database, chaos_redis, fleet
) -> None:
    url, _ = chaos_database
    engine, worker = start_audited_pipeline(url, fleet)
    write_entries(engine, sample_entries(ENTRIES, seed=9))
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT collection_id, content_id, work_version FROM _emdash_media_usage_work")
        )
        real = [(r[0], r[1], int(r[2])) for r in rows]
    cases = list(forgeries(random.Random(18), real, FUZZ))
    _publish(chaos_redis.url, cases)  # while the drain runs
    write_entries(engine, sample_entries(200, start=ENTRIES, seed=10))
    wait_for(lambda: work_rows(engine) == 0 and quiet(engine), timeout=300, interval=0.5)
    expected_drops = sum(case.drop for case in cases)
    wait_for(lambda: _dropped_lines(fleet.logs()) >= expected_drops, timeout=60, interval=0.5)
    logs = fleet.logs()

    report = audit.check(engine, tolerance_ms=50 if dialect == "postgresql" else 0)
    labelled = [case.headers["id"] for case in cases if case.labelled]
    named = re.findall(r"dropped (?:message|broker entry) id=(fuzz-\d+):", logs)
    figures = {"dialect": dialect, "messages": len(cases), "must_drop": expected_drops,
               "dropped_lines": _dropped_lines(logs), "claims": report.claims}  # fmt: skip
    print("fuzz figures:", json.dumps(figures))
    assert worker.poll() is None, "the worker exited"
    assert "Unrecoverable error" not in logs and "Traceback" not in logs
    assert "exited with" not in logs  # no pool child was killed
    assert sorted(named) == sorted(labelled)  # each labelled message: exactly one line
    assert figures["dropped_lines"] == expected_drops
    assert report.stale == []
    assert report.claims == report.completions == ENTRIES + 200
    assert actual_index(engine) == expected_index(engine)
    engine.dispose()


def _dropped_lines(logs: str) -> int:
    return len(re.findall(r"dropped (?:message|broker entry)", logs))
