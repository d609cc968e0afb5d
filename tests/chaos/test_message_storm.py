"""A storm of 10,000 forged and duplicated ``media_usage.process_work`` messages and 2,000
``media_usage.process_batch`` messages of the same items during a normal drain: nothing changes
beyond legitimate claims, no worker crash-loops, throughput recovers."""

from __future__ import annotations

import json
import random
import time

import pytest
import sqlalchemy as sa
from celery import Celery
from kombu.exceptions import ChannelError

from media_usage_worker.domain.sample_content import sample_entries
from media_usage_worker.sample_content import write_entries
from tests.chaos import audit
from tests.chaos.pipeline import start_audited_pipeline
from tests.index_oracle import actual_index, expected_index
from tests.processes import wait_for, work_rows

STORM = 10_000
BATCHES = 2_000
QUEUE = "media_usage"


def _forgeries(rng: random.Random, real: list[tuple[str, str]]) -> list[list]:
    """Random ids, old and absurd versions, wrong types and arities, oversized values, and
    plain duplicates of real items."""
    collection_id, content_id = rng.choice(real)
    return rng.choice([
        ["01" + "".join(rng.choices("ABCDEFGHJKMNPQRSTVWXYZ0123456789", k=24)),
         f"x{rng.randrange(10**6)}", rng.randrange(1, 10)],
        [collection_id, content_id, 0],
        [collection_id, content_id, -5],
        [collection_id, content_id, 10**30],
        [collection_id, content_id, "1; DROP TABLE _emdash_media_usage_work"],
        [collection_id, content_id, 1],  # a duplicate of a real message
        [{"id": collection_id}, [content_id], None],
        [1.5, True, "7"],
        ["x" * 100_000, content_id, 1],
        [collection_id, "\u0000" * 10, 1],
        [collection_id],  # wrong arity: the task cannot even be called
    ])  # fmt: skip


def _queued(app: Celery) -> int:
    try:
        with app.connection_for_write() as conn:
            return conn.default_channel.queue_declare(queue=QUEUE, passive=True).message_count
    except ChannelError:
        return 0  # Redis drops empty lists


def _drain_rate(engine: sa.Engine, count: int, start: int) -> float:
    began = time.monotonic()
    write_entries(engine, sample_entries(count, start=start, seed=start))
    wait_for(lambda: work_rows(engine) == 0, timeout=180, interval=0.2)
    return count / (time.monotonic() - began)


# The storm's SQL is a failed claim per message; the forged-message acceptance test covers
# that on both dialects. The full storm runs on PostgreSQL in CI and on SQLite with -m on_demand,
# which keeps the chaos suite near its five-minute budget.
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "dialect", ["postgresql", pytest.param("sqlite", marks=pytest.mark.on_demand)], indirect=True
)
def test_a_message_storm_changes_nothing_and_throughput_recovers(
    dialect: str, chaos_database, chaos_redis, fleet
) -> None:
    url, _ = chaos_database
    engine, worker = start_audited_pipeline(url, fleet)
    before = _drain_rate(engine, 200, start=0)

    # A client of its own, like any other publisher on the broker (JSON only, as the workers).
    publisher = Celery("storm", broker=chaos_redis.url, set_as_current=False)
    publisher.conf.update(task_serializer="json", accept_content=["json"])
    write_entries(engine, sample_entries(600, start=10_000, seed=2))
    with engine.connect() as conn:
        real = [tuple(r) for r in conn.execute(sa.text(
            "SELECT collection_id, content_id FROM _emdash_media_usage_work"))]  # fmt: skip
    rng = random.Random(5)
    with publisher.producer_or_acquire() as producer:
        for _ in range(STORM):
            publisher.send_task("media_usage.process_work", args=_forgeries(rng, real),
                          queue=QUEUE, producer=producer)  # fmt: skip
        for _ in range(BATCHES):
            items = [_forgeries(rng, real) for _ in range(rng.randrange(1, 6))]
            publisher.send_task("media_usage.process_batch", args=[items], queue=QUEUE,
                                producer=producer)  # fmt: skip
    wait_for(lambda: work_rows(engine) == 0, timeout=300, interval=0.5)
    wait_for(lambda: _queued(publisher) == 0, timeout=300, interval=0.5)
    after = _drain_rate(engine, 200, start=20_000)

    report = audit.check(engine, tolerance_ms=50 if dialect == "postgresql" else 0)
    logs = fleet.logs()
    figures = {"dialect": dialect, "storm": STORM, "drain_rate_before": round(before, 1),
               "drain_rate_after": round(after, 1), "claims": report.claims,
               "stale": len(report.stale),
               "invalid_messages_logged": logs.count("dropped message id=")}  # fmt: skip
    print("storm figures:", json.dumps(figures))
    assert worker.poll() is None, "the worker died"
    assert "exited with" not in logs and "WorkerLostError" not in logs  # no pool child crashed
    assert figures["invalid_messages_logged"] > STORM / 3
    assert report.stale == []
    assert report.claims == report.completions == 1000  # only the real items were claimed
    assert actual_index(engine) == expected_index(engine)
    assert after >= before / 2, figures  # the storm is over and the pipeline is back to speed
    engine.dispose()
    publisher.close()
