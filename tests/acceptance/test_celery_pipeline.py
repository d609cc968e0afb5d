"""The whole pipeline with real Redis and real Celery workers: ticks, fan-out, claims, fencing."""

from __future__ import annotations

import json
import random
import signal
import threading

import pytest
import redis
import sqlalchemy as sa
from celery.signals import task_success

from media_usage_worker.repository.work_queue.work import MediaUsageWorkRepository
from tests.index_oracle import (
    actual_index,
    actual_source_keys,
    expected_index,
    expected_source_keys,
)
from tests.processes import Processes, wait_for, work_rows
from tests.support import (
    PAST,
    SAMPLE_FIELDS,
    active_collection,
    complete_without_note,
    get_work,
    mark_coverage_complete,
    set_work,
    status_row,
)


@pytest.fixture
def sample_posts(db):
    """The posts collection with the sample fields, capture active."""
    return active_collection(db, "posts", SAMPLE_FIELDS)


def write_entries(db: sa.Engine, count: int, prefix: str = "e") -> None:
    rng = random.Random(count)
    with db.begin() as conn:
        for i in range(count):
            gallery = [{"image": f"m{rng.randrange(20)}"} for _ in range(rng.randrange(4))]
            conn.execute(
                sa.text("INSERT INTO ec_posts (id, title, hero, gallery) VALUES (:i, :t, :h, :g)"),
                {
                    "i": f"{prefix}{i:04d}",
                    "t": f"Entry {i}",
                    "h": f"m{i % 20}",
                    "g": json.dumps(gallery),
                },
            )


def assert_index_is_exact(db: sa.Engine) -> None:
    assert work_rows(db) == 0
    assert actual_index(db) == expected_index(db)
    assert actual_source_keys(db) == expected_source_keys(db)


def drained(db: sa.Engine, entries: int) -> bool:
    return work_rows(db) == 0 and len(actual_source_keys(db)) >= entries


class Outcomes:
    """Per item, the outcomes of process_work and process_batch in this process (the
    in-process worker runs here); ``batches`` counts the batch messages."""

    def __init__(self) -> None:
        self.items: list[dict] = []
        self.batches = 0
        self.lock = threading.Lock()

    def __call__(self, sender=None, result=None, **_) -> None:
        name = getattr(sender, "name", None)
        with self.lock:
            if name == "media_usage.process_work":
                self.items.append(result)
            elif name == "media_usage.process_batch":
                self.batches += 1
                for outcome, count in result["outcomes"].items():
                    self.items += [{"outcome": outcome}] * count


@pytest.fixture
def outcomes():
    collector = Outcomes()
    task_success.connect(collector, weak=False)
    yield collector
    task_success.disconnect(collector)


def test_in_process_worker_indexes_entries_written_by_plain_sql(
    db, sample_posts, celery_worker, outcomes, monkeypatch
) -> None:
    from media_usage_worker.tasks.work import tick

    monkeypatch.setenv("MEDIA_USAGE_BATCH_SIZE", "50")
    write_entries(db, 200)

    def ticked_and_drained() -> bool:
        tick.apply_async()
        return drained(db, 200)

    wait_for(ticked_and_drained, timeout=120, interval=1.0)
    assert_index_is_exact(db)
    completed = [o for o in outcomes.items if o["outcome"] == "completed"]
    assert len(completed) == 200
    assert outcomes.batches >= 4  # a backlog of 200 goes as batches of at most 50


def test_a_forged_batch_is_dropped_whole_and_a_real_one_is_indexed(
    db, sample_posts, celery_worker, outcomes, caplog
) -> None:
    from media_usage_worker.tasks.work import process_batch

    write_entries(db, 30)
    real = [[sample_posts.id, f"e{i:04d}", 1] for i in range(30)]
    for forged in ([*real[:2], ["x", "", 1]], [[sample_posts.id, "e0000"]], "not a list"):
        process_batch.apply_async(args=(forged,))
    process_batch.apply_async(args=(real + real[:5],))  # duplicates count once
    wait_for(lambda: outcomes.batches >= 1, timeout=60)
    assert sorted(o["outcome"] for o in outcomes.items) == ["completed"] * 30
    assert_index_is_exact(db)


def test_a_host_app_sends_after_write_by_name_without_importing_the_project(
    db, sample_posts, celery_worker, outcomes, task_env
) -> None:
    """A host's own app sends ``media_usage.after_write`` by name; the worker sends the item
    (no tick runs here) and indexes it. A malformed one is dropped by the message guard."""
    from celery import Celery

    from media_usage_worker.tasks.consumer import dropped

    host = Celery("host", broker=task_env["MEDIA_USAGE_BROKER_URL"], set_as_current=False)
    write_entries(db, 3)
    dropped_before = dropped.snapshot()["total"]
    host.send_task("media_usage.after_write", args=["Bad Slug!", "e0000"], queue="media_usage")
    for content_id in ("e0000", "e0001"):
        host.send_task("media_usage.after_write", args=["posts", content_id], queue="media_usage")
    wait_for(lambda: len(outcomes.items) == 2, timeout=60)
    assert {o["content_id"] for o in outcomes.items} == {"e0000", "e0001"}
    assert {o["outcome"] for o in outcomes.items} == {"completed"}
    assert get_work(db, sample_posts.id, "e0002")["state"] == "pending"  # not sent: no tick
    wait_for(lambda: dropped.snapshot()["total"] - dropped_before == 1, timeout=30)
    host.close()


def test_every_item_sent_five_times_is_processed_once(
    db, sample_posts, celery_worker, outcomes
) -> None:
    from media_usage_worker.tasks.work import process_work

    write_entries(db, 40)
    due = MediaUsageWorkRepository(db).find_due_work(100)
    assert len(due) == 40
    for _ in range(5):
        for item in due:
            process_work.apply_async(args=(item.collection_id, item.content_id, item.work_version))
    wait_for(lambda: len(outcomes.items) == 200, timeout=120)
    by_item: dict[str, list[str]] = {}
    for outcome in outcomes.items:
        by_item.setdefault(outcome["content_id"], []).append(outcome["outcome"])
    assert all(sorted(v) == ["claim_lost"] * 4 + ["completed"] for v in by_item.values()), by_item
    assert_index_is_exact(db)


# Well-formed messages for items that do not exist or versions that never were: the claim
# refuses them (claim_lost).
FORGED_VALID = [
    ("unknown", "nope", 1),
    ("{collection}", "e0000", 99),
]
# Malformed ones: the worker's consumer drops them before any task runs.
FORGED_INVALID = [
    (None, "e0000", 1),
    (5, 6, 7),
    ("x" * 100_000, "e0000", 1),
    ("{collection}", "e0000", "1; DROP TABLE ec_posts"),
    ("{collection}", "e0000", True),
    ("{collection}", ["e0000"], 1),
    ("{collection}", "e0000", -1),
    ("{collection}", "e0000", 1.5),
    ("{collection}", "e\x00", 1),
    ("{collection}", "e\ud800", 1),
]


def test_forged_messages_change_nothing_and_the_worker_keeps_going(
    db, sample_posts, celery_worker, outcomes, caplog
) -> None:
    import logging

    from media_usage_worker.tasks.consumer import dropped
    from media_usage_worker.tasks.work import process_work

    # The worker rewires the root logger; listen on the consumer's logger itself.
    message_log = logging.getLogger("media_usage.messages")
    message_log.addHandler(caplog.handler)
    caplog.set_level(logging.WARNING, logger="media_usage.messages")
    write_entries(db, 1)
    before = get_work(db, sample_posts.id, "e0000")
    dropped_before = dropped.snapshot()["total"]
    for collection_id, content_id, version in FORGED_INVALID + FORGED_VALID:
        if collection_id == "{collection}":
            collection_id = sample_posts.id
        process_work.apply_async(args=(collection_id, content_id, version))
    wait_for(lambda: len(outcomes.items) == len(FORGED_VALID), timeout=60)
    wait_for(lambda: dropped.snapshot()["total"] - dropped_before == len(FORGED_INVALID), 60)
    assert {o["outcome"] for o in outcomes.items} == {"claim_lost"}
    assert get_work(db, sample_posts.id, "e0000") == before
    lines = {r.getMessage() for r in caplog.records if r.name == "media_usage.messages"}
    assert len(lines) == len(FORGED_INVALID)  # one line each, naming its own message id
    assert "x" * 1000 not in caplog.text  # no echo of huge values into logs
    message_log.removeHandler(caplog.handler)
    # The worker is alive and still does real work.
    process_work.apply_async(args=(sample_posts.id, "e0000", 1))
    wait_for(lambda: work_rows(db) == 0, timeout=60)
    assert_index_is_exact(db)


def test_subprocess_worker_and_two_beats_survive_flush_and_kill(
    db, sample_posts, processes, broker_url
) -> None:
    """Two beats at once, a Redis FLUSHALL and a SIGKILLed worker: everything still completes."""
    processes.beat()
    processes.beat()
    first = processes.worker(concurrency=2)
    write_entries(db, 150, prefix="a")
    wait_for(lambda: work_rows(db) < 150, timeout=60)
    processes.kill(first, signal.SIGKILL)  # mid-drain: any lease it held must expire and be redone
    redis.Redis.from_url(broker_url).flushall()
    write_entries(db, 150, prefix="b")
    processes.worker(concurrency=2)
    wait_for(lambda: drained(db, 300), timeout=120, interval=0.5)
    assert_index_is_exact(db)
    assert "Traceback" not in processes.logs()


@pytest.mark.parametrize("dialect", ["postgresql"])  # holding a worker mid-item needs a lock
def test_a_worker_killed_mid_item_hands_it_over_after_the_lease(
    db, sample_posts, processes
) -> None:
    write_entries(db, 1)
    blocker = db.connect()
    blocker.begin()
    # The refresh reads the field registry right after the claim: it waits here, lease held.
    blocker.execute(sa.text("LOCK TABLE _emdash_fields IN ACCESS EXCLUSIVE MODE"))
    worker = processes.worker(concurrency=1)
    processes.beat()
    wait_for(lambda: get_work(db, sample_posts.id, "e0000")["state"] == "leased", timeout=60)
    token = get_work(db, sample_posts.id, "e0000")["lease_token"]
    processes.kill(worker)
    blocker.rollback()
    blocker.close()
    processes.worker(concurrency=1)
    wait_for(lambda: work_rows(db) == 0, timeout=60)
    assert_index_is_exact(db)
    assert token  # the killed holder had the lease; another worker completed the item


def test_worker_and_beat_index_500_entries_within_a_minute(db, sample_posts, processes) -> None:
    """The issue's acceptance bar: plain-SQL writes, `celery worker` + `celery beat`, 60 s."""
    processes.worker(concurrency=2)
    processes.beat()
    write_entries(db, 500)
    wait_for(lambda: drained(db, 500), timeout=60, interval=0.5)
    assert_index_is_exact(db)


def test_the_tick_restores_coverage_a_worker_killed_after_completing_left_stale(
    db, sample_posts, celery_app
) -> None:
    """The note follows the completion's commit; a kill between the two is simulated by
    completing through the repository and sending no note. The next tick restores."""
    from media_usage_worker.tasks.work import tick

    mark_coverage_complete(db)
    write_entries(db, 1)
    complete_without_note(db, sample_posts.id, "e0000")
    assert status_row(db, sample_posts.id)["status"] == "stale"

    summary = tick.apply().get()
    assert summary["coverage_restored"] == ["posts"] and summary["dispatched"] == 0
    assert status_row(db, sample_posts.id)["status"] == "complete"
    assert tick.apply().get()["coverage_restored"] == []


def test_worker_and_beat_started_before_the_schema_wait_with_one_line_then_work(
    database_url, broker_url, tmp_path
) -> None:
    """Started before ``db upgrade``: one line saying what to do, no traceback per tick, and
    the pipeline works as soon as the schema is there (no restart)."""
    from media_usage_worker.repository.base.db import create_engine
    from media_usage_worker.repository.migration.migrate import upgrade

    fleet = Processes(
        {
            "MEDIA_USAGE_DATABASE_URL": database_url,
            "MEDIA_USAGE_BROKER_URL": broker_url,
            "MEDIA_USAGE_TICK_SECONDS": "1",
            "MEDIA_USAGE_RECONCILE_SECONDS": "1",
            "MEDIA_USAGE_LEASE_SECONDS": "3",
        },
        tmp_path,
    )
    try:
        fleet.worker(concurrency=1)
        fleet.beat()
        wait_for(lambda: fleet.logs().count("media_usage.tick[") >= 6, timeout=60, interval=0.5)
        logs = fleet.logs()
        assert logs.count("media usage is waiting: the database has no media usage schema") == 1
        assert "Traceback" not in logs and "ERROR" not in logs

        upgrade(database_url)
        # Migrated but not activated: one more line, saying to activate.
        inactive = "media usage is waiting: capture is not active"
        wait_for(lambda: inactive in fleet.logs(), timeout=60, interval=0.5)
        ticks = fleet.logs().count("media_usage.tick[")
        wait_for(lambda: fleet.logs().count("media_usage.tick[") >= ticks + 3, timeout=60)
        assert fleet.logs().count(inactive) == 1
        db = create_engine(database_url)
        active_collection(db, "posts", SAMPLE_FIELDS)
        write_entries(db, 20)
        wait_for(lambda: drained(db, 20), timeout=60, interval=0.5)
        assert_index_is_exact(db)
        db.dispose()
    finally:
        fleet.stop_all()


def test_an_item_past_the_soft_limit_retries_then_fails_and_no_child_is_killed(
    db, sample_posts, processes
) -> None:
    """A real prefork worker with a 1 s soft limit and an item that takes seconds (45,000
    gallery images): each attempt ends at the soft limit with attempt + 1 and
    ``MEDIA_USAGE_TIME_LIMIT``; the fifth fails the item; the hard limit never fires."""
    processes.env.update(
        {"MEDIA_USAGE_TASK_SOFT_TIME_LIMIT": "1", "MEDIA_USAGE_TASK_TIME_LIMIT": "60"}
    )
    # No reconciliation: a rescan would enqueue the failed item again (by design).
    mark_coverage_complete(db)
    gallery = json.dumps([{"image": f"m{i}"} for i in range(45_000)])
    write_entries(db, 3)
    with db.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO ec_posts (id, gallery) VALUES ('slow', :g)"), {"g": gallery}
        )
    worker = processes.worker(concurrency=1)
    processes.beat()

    for attempt in range(1, 6):
        wait_for(
            lambda attempt=attempt: (
                get_work(db, sample_posts.id, "slow")["attempt_count"] >= attempt
            ),
            timeout=90,
            interval=0.2,
        )
        row = get_work(db, sample_posts.id, "slow")
        assert (row["attempt_count"], row["last_error_code"]) == (attempt, "MEDIA_USAGE_TIME_LIMIT")
        assert row["state"] == ("failed" if attempt == 5 else "retry")
        assert row["lease_token"] is None
        if row["state"] == "retry":  # the backoff is 30 s and more: make the retry due now
            set_work(db, sample_posts.id, "slow", next_attempt_at=PAST)

    wait_for(lambda: work_rows(db) == 1, timeout=60)  # the three others completed
    logs = processes.logs()
    assert worker.poll() is None
    assert "exited with" not in logs and "Hard time limit" not in logs

    # The item's failure note follows its failing commit, or (if the status row was held
    # then) the next tick writes it.
    def coverage() -> tuple[str, str]:
        status = status_row(db, sample_posts.id)
        return status["status"], status["last_error_code"]

    wait_for(lambda: coverage() == ("partial", "MEDIA_USAGE_TIME_LIMIT"), timeout=60)


def test_celery_built_in_tasks_are_dropped_on_this_queue(
    db, sample_posts, celery_worker, celery_app
) -> None:
    from celery.signals import task_prerun

    from media_usage_worker.tasks.consumer import dropped

    ran: list[str] = []

    def seen(sender=None, **_) -> None:
        ran.append(getattr(sender, "name", "?"))

    task_prerun.connect(seen, weak=False)
    before = dropped.snapshot()["total"]
    try:
        celery_app.send_task(
            "celery.starmap", args=["media_usage.tick", [[] for _ in range(50)]],
            queue="media_usage",
        )  # fmt: skip
        celery_app.send_task(
            "celery.chord_unlock", args=["group-id", {"task": "media_usage.tick"}],
            queue="media_usage",
        )  # fmt: skip
        wait_for(lambda: dropped.snapshot()["total"] - before == 2, timeout=60)
        # The worker still runs this project's tasks, and ran none of the forged ones.
        write_entries(db, 1)
        (item,) = MediaUsageWorkRepository(db).find_due_work(10)
        from media_usage_worker.tasks.work import process_work

        process_work.apply_async(args=(item.collection_id, item.content_id, item.work_version))
        wait_for(lambda: work_rows(db) == 0, timeout=60)
    finally:
        task_prerun.disconnect(seen)
    assert not any(name.startswith("celery.") for name in ran), ran
    assert "media_usage.tick" not in ran


def test_messages_from_a_sender_whose_clock_is_behind_still_run(
    db, sample_posts, celery_worker, celery_app, outcomes
) -> None:
    from datetime import UTC, datetime, timedelta

    behind = (datetime.now(UTC) - timedelta(seconds=61)).isoformat()
    write_entries(db, 1)
    (item,) = MediaUsageWorkRepository(db).find_due_work(10)
    celery_app.send_task(
        "media_usage.process_work",
        args=(item.collection_id, item.content_id, item.work_version),
        queue="media_usage", expires=behind,
    )  # fmt: skip
    wait_for(lambda: len(outcomes.items) == 1, timeout=60)
    assert outcomes.items[0]["outcome"] == "completed"
    assert work_rows(db) == 0


def test_ticks_queued_while_workers_were_away_run_once(
    db, sample_posts, celery_worker, celery_app, monkeypatch
) -> None:
    from celery.signals import task_success

    # Half of a 60 s interval covers the whole burst, however slow the machine.
    monkeypatch.setenv("MEDIA_USAGE_TICK_SECONDS", "60")
    results: list[dict] = []

    def collect(sender=None, result=None, **_) -> None:
        if getattr(sender, "name", None) == "media_usage.tick":
            results.append(result)

    task_success.connect(collect, weak=False)
    try:
        for _ in range(20):
            celery_app.send_task("media_usage.tick", queue="media_usage")
        wait_for(lambda: len(results) == 20, timeout=60)
    finally:
        task_success.disconnect(collect)
    ran = [r for r in results if "skipped" not in r]
    assert len(ran) == 1 and ran[0]["active"] is True


def test_a_tick_says_why_the_database_cannot_be_read(celery_app, monkeypatch, tmp_path) -> None:
    """Not "not migrated" when the truth is a database that cannot be opened or read (a full
    disk, a path that is a directory): the tick's result names what the database said."""
    from media_usage_worker.tasks.work import tick

    unreadable = tmp_path / "is-a-directory.db"
    unreadable.mkdir()
    monkeypatch.setenv("MEDIA_USAGE_DATABASE_URL", f"sqlite:///{unreadable}")
    summary = tick.apply().get()
    assert summary["active"] is False
    assert summary["schema"].startswith("the database cannot be read: "), summary
