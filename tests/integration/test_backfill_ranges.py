"""A reconciliation's scan hands out key ranges instead of a work row per entry: both dialects,
driven without Celery (the coordinator's tick, then the workers' part with ``RangeRun``)."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from media_usage_worker.api import MediaUsage
from media_usage_worker.domain.policy import Limits
from media_usage_worker.pipeline.backfill import MAX_RANGE_CLAIMS, RangeOutcome, RangeRun
from media_usage_worker.pipeline.capture import activate
from media_usage_worker.pipeline.reconciliation import Reconciler
from media_usage_worker.pipeline.registry import add_media_url_prefix
from media_usage_worker.repository.base.schema import (
    backfill_ranges,
    reconciliations,
    sources,
    work,
)
from media_usage_worker.repository.reconciling import ranges
from media_usage_worker.repository.registry.collections import CollectionRegistry
from tests.index_oracle import actual_index, expected_index
from tests.integration.test_reconciliation import INSERT, entries, write
from tests.support import PAST, SAMPLE_FIELDS, drain, reconcile_until_complete, status_row


@pytest.fixture
def registered_posts(db: sa.Engine):
    return CollectionRegistry(db).create_collection("posts", "Posts", SAMPLE_FIELDS)


def count(engine: sa.Engine, table: sa.Table) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()


def scanned(engine: sa.Engine, entry_count: int, range_size: int = 100) -> Reconciler:
    """``entry_count`` entries written before activation, and the run's first scan step."""
    write(engine, INSERT, entries(entry_count))
    activate(engine)
    reconciler = Reconciler(engine, defer_seconds=0, range_size=range_size)
    reconciler.tick(max_steps=2)
    return reconciler


def sent(engine: sa.Engine) -> list[tuple[str, str]]:
    """The ranges' messages, as ``send_ranges`` would send them: ``(collection_id, range_id)``."""
    return [(cid, rid) for cid, rid, _ in ranges.mark_for_dispatch(engine, 0, 1000)]


def test_a_backfill_writes_no_work_row_per_entry(db, registered_posts) -> None:
    scanned(db, 450)
    # 450 ids in ranges of 100: five ranges, and not one work row.
    assert count(db, backfill_ranges) == 5
    assert count(db, work) == 0
    reports = [RangeRun(db, Limits()).run(*message) for message in sent(db)]
    assert [r.outcome for r in reports] == [RangeOutcome.DONE] * 5
    assert sum(r.indexed for r in reports) == 450
    assert count(db, backfill_ranges) == 0 and count(db, work) == 0
    reconcile_until_complete(db, registered_posts.id)
    assert actual_index(db) == expected_index(db)
    # Read as complete: the run recorded the fields it indexed, as the registry has them.
    (posts,) = MediaUsage(db).status().collections
    assert posts.coverage == "complete"


def test_a_run_an_earlier_worker_recorded_is_restarted_with_ranges(db, registered_posts) -> None:
    from media_usage_worker.domain.snapshots import field_fingerprint
    from media_usage_worker.repository.registry.field_registry import load_fields

    scanned(db, 30)
    # A worker from before ranges took a step: it recorded its fields' bare fingerprint.
    bare = field_fingerprint(load_fields(db, registered_posts.id))
    with db.begin() as conn:
        conn.execute(reconciliations.update().values(field_fingerprint=bare, next_attempt_at=PAST))
    reports = Reconciler(db, defer_seconds=0, range_size=100).tick(max_steps=1)
    assert [r.action for r in reports] == ["restarted"]
    reconcile_until_complete(db, registered_posts.id)
    assert actual_index(db) == expected_index(db)


def test_a_range_is_claimed_once_by_concurrent_workers(db, registered_posts) -> None:
    scanned(db, 50)
    ((collection_id, range_id),) = sent(db)
    start = threading.Barrier(4)
    claims: list[object] = []

    def claim() -> None:
        start.wait()
        claims.append(ranges.claim_range(db, collection_id, range_id, 60))

    threads = [threading.Thread(target=claim) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(claim is not None for claim in claims) == 1


def test_a_holder_whose_run_restarted_writes_nothing(db, registered_posts) -> None:
    reconciler = scanned(db, 30)
    ((collection_id, range_id),) = sent(db)

    def restart() -> None:
        # A rules change ends the run; the next step restarts it and deletes its ranges.
        add_media_url_prefix(db, "https://cdn.example/media/")
        reconciler.tick(max_steps=3)

    report = RangeRun(db, Limits(), before_write=restart).run(collection_id, range_id)
    assert report.outcome == RangeOutcome.LEASE_LOST
    assert count(db, sources) == 0
    # The restart deleted the old run's range; the new run's own ranges index everything.
    with db.connect() as conn:
        left = conn.execute(sa.select(backfill_ranges.c.range_id)).scalars().all()
    assert range_id not in left
    reconcile_until_complete(db, registered_posts.id)
    assert actual_index(db) == expected_index(db)


def test_an_entry_written_during_a_chunk_is_left_to_its_own_work(db, registered_posts) -> None:
    scanned(db, 20)
    ((collection_id, range_id),) = sent(db)

    def edit() -> None:
        write(db, "UPDATE ec_posts SET hero = 'm-new', version = version + 1 WHERE id = 'e00007'")

    report = RangeRun(db, Limits(), before_write=edit).run(collection_id, range_id)
    assert report.outcome == RangeOutcome.DONE
    # The edited entry's guard lost; it has its own work row from the capture trigger.
    assert report.indexed == 19
    with db.connect() as conn:
        queued = conn.execute(sa.select(work.c.content_id)).scalars().all()
    assert queued == ["e00007"]
    reconcile_until_complete(db, registered_posts.id)
    assert actual_index(db) == expected_index(db)


def test_entries_a_range_cannot_index_go_back_as_work_items(db, registered_posts) -> None:
    scanned(db, 20)
    ((collection_id, range_id),) = sent(db)
    # Every entry is over this limit: the refresh refuses each one.
    report = RangeRun(db, Limits(max_entry_chars=10)).run(collection_id, range_id)
    assert (report.outcome, report.indexed, report.handed_back) == (RangeOutcome.DONE, 0, 20)
    with db.connect() as conn:
        rows = conn.execute(sa.select(work.c.state, work.c.change_epoch)).all()
    epoch = status_row(db, registered_posts.id)["change_epoch"]
    assert len(rows) == 20 and {(state, e) for state, e in rows} == {("pending", epoch)}


def test_a_range_claimed_too_often_is_handed_back_whole(db, registered_posts) -> None:
    scanned(db, 40)
    ((collection_id, range_id),) = sent(db)
    # Holders that died: each claim's lease is already over.
    for _ in range(MAX_RANGE_CLAIMS):
        assert ranges.claim_range(db, collection_id, range_id, 0) is not None
    report = RangeRun(db, Limits()).run(collection_id, range_id)
    assert (report.outcome, report.handed_back) == (RangeOutcome.DEMOTED, 40)
    assert count(db, backfill_ranges) == 0 and count(db, work) == 40
    drain(db)
    reconcile_until_complete(db, registered_posts.id)
    assert actual_index(db) == expected_index(db)


def test_a_range_is_sent_again_only_when_its_message_or_holder_is_lost(
    db, registered_posts
) -> None:
    scanned(db, 40)
    ((collection_id, range_id, times),) = ranges.mark_for_dispatch(db, 60, 100)
    assert times == 1
    # Its message is alive: not sent again, however often asked.
    assert ranges.mark_for_dispatch(db, 60, 100) == []
    # Held by a live worker: not sent, even past the delay.
    held = ranges.claim_range(db, collection_id, range_id, 60)
    assert held is not None
    assert ranges.mark_for_dispatch(db, 0, 100) == []
    # Given back (or its holder died): sent again, counted as sent twice.
    assert ranges.release_range(db, held)
    assert ranges.mark_for_dispatch(db, 0, 100) == [(collection_id, range_id, 2)]


def test_the_run_waits_for_its_ranges(db, registered_posts) -> None:
    reconciler = scanned(db, 450)
    for _ in range(5):
        reconciler.tick()  # every id is handed out, and nothing has indexed any
    status = status_row(db, registered_posts.id)
    assert (status["status"], status["reconciliation_required"]) == ("running", 1)
    assert count(db, backfill_ranges) == 5


def test_a_chunk_never_waits_long_on_a_hosts_transaction(db, registered_posts, dialect) -> None:
    """A host's transaction holds the work row of an entry the range must hand back: the chunk
    gives up its lock wait (before PostgreSQL's deadlock check could pick the host), nothing of
    it is written, and the host commits."""
    if dialect == "sqlite":
        pytest.skip("SQLite has no row locks: a content write keeps every other writer out")
    scanned(db, 10)
    ((collection_id, range_id),) = sent(db)
    host = db.connect()
    host_tx = host.begin()
    # The capture trigger locks e00003's work row until the host commits.
    host.execute(sa.text("UPDATE ec_posts SET hero = 'm-host', version = version + 1 "
                         "WHERE id = 'e00003'"))  # fmt: skip
    try:
        # Every entry is over this limit, so every one is handed back as a work item.
        report = RangeRun(db, Limits(max_entry_chars=10)).run(collection_id, range_id)
    finally:
        host_tx.commit()
        host.close()
    assert report.outcome == RangeOutcome.LEASE_LOST
    with db.connect() as conn:
        queued = conn.execute(sa.select(work.c.content_id)).scalars().all()
    assert queued == ["e00003"]  # the host's own, committed; the chunk wrote nothing
    assert count(db, backfill_ranges) == 1


def test_a_range_whose_run_is_gone_is_never_sent(db, registered_posts) -> None:
    scanned(db, 40)
    with db.begin() as conn:  # as a deactivation racing the scan step could leave it
        conn.execute(reconciliations.delete())
    assert ranges.mark_for_dispatch(db, 0, 100) == []
