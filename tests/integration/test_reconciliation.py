"""Reconciliation and manual repair on both dialects, driven without Celery (tick + drain)."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from media_usage_worker.pipeline.capture import activate
from media_usage_worker.pipeline.reconciliation import Reconciler
from media_usage_worker.repository.reconciling import reconciliation as reconciliations
from media_usage_worker.repository.registry.collections import CollectionRegistry
from tests.index_oracle import (
    actual_index,
    actual_source_keys,
    expected_index,
    expected_source_keys,
)
from tests.support import PAST, SAMPLE_FIELDS, drain, status_row

FIELDS = SAMPLE_FIELDS


def write(engine: sa.Engine, statement: str, rows: list[dict] | dict | None = None) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(statement), rows or {})


def entries(count: int, prefix: str = "e") -> list[dict]:
    return [
        {
            "id": f"{prefix}{i:05d}",
            "hero": f"m{i % 13}",
            "gallery": json.dumps([{"image": f"g{i % 5}"}]),
        }
        for i in range(count)
    ]


INSERT = "INSERT INTO ec_posts (id, hero, gallery) VALUES (:id, :hero, :gallery)"


def converge(engine: sa.Engine, collection_id: str, rounds: int = 400) -> list[str]:
    """Alternate reconciliation ticks and worker drains; time passes between rounds."""
    reconciler = Reconciler(engine, defer_seconds=0)
    actions = []
    for _ in range(rounds):
        actions += [report.action for report in reconciler.tick()]
        drain(engine)
        if status_row(engine, collection_id)["status"] in ("complete", "failed", "partial"):
            return actions
    raise AssertionError(f"did not converge: {actions[-10:]}")


@pytest.fixture
def registered_posts(db: sa.Engine):
    return CollectionRegistry(db).create_collection("posts", "Posts", FIELDS)


def test_entries_from_before_activation_are_reconciled_to_complete(db, registered_posts) -> None:
    write(db, INSERT, entries(500))
    activate(db)
    assert status_row(db, registered_posts.id)["reconciliation_required"] == 1
    actions = converge(db, registered_posts.id)
    status = status_row(db, registered_posts.id)
    assert (status["status"], status["reconciliation_required"], status["cursor"]) == (
        "complete",
        0,
        None,
    )
    # 500 entries are one step of the scan (read 1,000 ids at a time, enqueued 50 a statement).
    assert actions.count("enqueued") >= 1 and "completed" in actions
    assert actual_index(db) == expected_index(db)
    assert actual_source_keys(db) == expected_source_keys(db)
    with db.connect() as conn:
        assert (
            conn.execute(
                sa.text("SELECT count(*) FROM _emdash_media_usage_reconciliations")
            ).scalar()
            == 0
        )


def test_writes_during_reconciliation_neither_restart_it_nor_outlive_it(
    db, registered_posts
) -> None:
    write(db, INSERT, entries(200))
    activate(db)
    reconciler = Reconciler(db, defer_seconds=0)
    reconciler.tick(max_steps=3)  # the run has started scanning
    write(db, INSERT, entries(20, prefix="late"))
    write(db, "UPDATE ec_posts SET hero = 'm99' WHERE id = 'e00001'")
    actions = converge(db, registered_posts.id)
    assert "restarted" not in actions
    assert status_row(db, registered_posts.id)["status"] == "complete"
    assert actual_index(db) == expected_index(db)


def test_a_run_ends_while_the_site_never_stops_writing(db, registered_posts) -> None:
    """A write lands after every round, so some write always waits when the run decides: the
    run still ends (``stale``, nothing left to reconcile), and the waiting write's completion
    makes coverage ``complete``."""
    write(db, INSERT, entries(300))
    activate(db)
    reconciler = Reconciler(db, defer_seconds=0)
    actions: list[str] = []
    for round_ in range(200):
        actions += [report.action for report in reconciler.tick()]
        status = status_row(db, registered_posts.id)
        if status["reconciliation_required"] == 0:
            break
        drain(db)
        write(db, INSERT, entries(1, prefix=f"w{round_:03d}-"))
    else:
        raise AssertionError(f"the run never ended: {actions[-10:]}")
    assert "restarted" not in actions and "completed" in actions
    assert (status["status"], status["cursor"]) == ("stale", None)
    assert reconciliations.work_backlog(db, registered_posts.id, 10) == 1
    drain(db)
    assert status_row(db, registered_posts.id)["status"] == "complete"
    assert actual_index(db) == expected_index(db)
    assert actual_source_keys(db) == expected_source_keys(db)


def test_a_write_does_not_take_the_runs_claims_away(db, registered_posts) -> None:
    from media_usage_worker.domain.policy import Limits
    from media_usage_worker.pipeline.backfill import RangeOutcome, RangeRun
    from media_usage_worker.repository.reconciling.ranges import mark_for_dispatch

    write(db, INSERT, entries(40))
    activate(db)
    Reconciler(db, defer_seconds=0).tick()  # the scan handed every entry out in one range
    ((collection_id, range_id, _),) = mark_for_dispatch(db, 0, 10)

    def writes() -> None:
        write(db, INSERT, entries(1, prefix="new"))
        write(db, "UPDATE ec_posts SET hero = 'm99', version = version + 1 WHERE id = 'e00001'")
        Reconciler(db, defer_seconds=0).tick()  # a step after the writes

    report = RangeRun(db, Limits(), before_write=writes).run(collection_id, range_id)
    # The range kept its claim; only the entry the write changed was not indexed by it: its
    # own row, at the later epoch, indexes it again.
    assert (report.outcome, report.indexed) == (RangeOutcome.DONE, 39)
    with db.connect() as conn:
        queued = conn.execute(sa.text("SELECT content_id FROM _emdash_media_usage_work")).all()
    assert sorted(row.content_id for row in queued) == ["e00001", "new00000"]


def test_entries_deleted_before_reconciliation_lose_their_sources(db, registered_posts) -> None:
    activate(db)
    write(db, INSERT, entries(30))
    drain(db)
    assert len(actual_source_keys(db)) == 30
    # Deleted while capture could not see it (e.g. written by a tool that bypassed capture).
    with db.begin() as conn:
        conn.execute(
            sa.text("UPDATE _emdash_media_usage_index_status SET capture_state = 'installing'")
        )
    with pytest.raises(sa.exc.DBAPIError):
        write(db, "DELETE FROM ec_posts WHERE id = 'e00003'")
    with db.begin() as conn:
        conn.execute(
            sa.text("DROP TRIGGER IF EXISTS " + _trigger(db, registered_posts, "ad") + _on(db))
        )
        conn.execute(sa.text("DELETE FROM ec_posts WHERE id IN ('e00003', 'e00004')"))
        conn.execute(
            sa.text(
                "UPDATE _emdash_media_usage_index_status SET capture_state = 'active', "
                "reconciliation_required = 1"
            )
        )
    activate(db)  # re-verification puts the missing trigger back
    converge(db, registered_posts.id)
    assert status_row(db, registered_posts.id)["status"] == "complete"
    assert actual_source_keys(db) == expected_source_keys(db)
    assert not any(":e00003:" in key for key in actual_source_keys(db))


def test_the_sources_phase_finds_every_gone_entry_whatever_its_step(
    db, registered_posts, monkeypatch
) -> None:
    """Steps of 7 keys over 30 entries: deleted entries on a step's first and last key, and
    in a step where every entry is gone, are all found; nothing present is taken for gone."""
    from media_usage_worker.pipeline import reconciliation as pipeline_reconciliation

    monkeypatch.setattr(pipeline_reconciliation, "SOURCES_STEP", 7)
    activate(db)
    write(db, INSERT, entries(30))
    drain(db)
    gone = ["e00000", "e00006", "e00007", *(f"e000{i}" for i in range(14, 21)), "e00029"]
    with db.begin() as conn:
        conn.execute(
            sa.text("UPDATE _emdash_media_usage_index_status SET capture_state = 'installing'")
        )
        conn.execute(
            sa.text("DROP TRIGGER IF EXISTS " + _trigger(db, registered_posts, "ad") + _on(db))
        )
        conn.execute(sa.text("DELETE FROM ec_posts WHERE id IN :ids").bindparams(
            sa.bindparam("ids", expanding=True)), {"ids": gone})  # fmt: skip
        conn.execute(
            sa.text(
                "UPDATE _emdash_media_usage_index_status SET capture_state = 'active', "
                "reconciliation_required = 1"
            )
        )
    activate(db)
    actions = converge(db, registered_posts.id)
    assert status_row(db, registered_posts.id)["status"] == "complete"
    assert actual_source_keys(db) == expected_source_keys(db)
    assert len(actual_source_keys(db)) == 30 - len(gone)
    assert actions.count("enqueued") >= 5  # the sources phase took several steps


def _trigger(db, registered_posts, suffix):
    from media_usage_worker.repository.lifecycle.triggers import trigger_names

    return trigger_names(registered_posts.id, "posts")[suffix]


def _on(db) -> str:
    return " ON ec_posts" if db.dialect.name == "postgresql" else ""


def test_a_failed_entry_fails_the_run_and_a_later_edit_reopens_it(db, registered_posts) -> None:
    write(
        db,
        "INSERT INTO revisions (id, collection, entry_id, data) "
        "VALUES ('bad', 'posts', 'e00001', 'nope')",
    )
    write(db, INSERT, entries(10))
    write(db, "UPDATE ec_posts SET draft_revision_id = 'bad' WHERE id = 'e00001'")
    activate(db)
    reconciler = Reconciler(db, defer_seconds=0)
    for _ in range(200):
        reconciler.tick()
        drain(db)
        with db.begin() as conn:  # retries become due at once: time passes
            conn.execute(
                sa.text(
                    "UPDATE _emdash_media_usage_work SET next_attempt_at = :p WHERE state = 'retry'"
                ),
                {"p": PAST},
            )
        if status_row(db, registered_posts.id)["status"] in ("failed", "partial"):
            break
    status = status_row(db, registered_posts.id)
    assert (status["status"], status["last_error_code"]) == (
        "partial",
        "MEDIA_USAGE_SNAPSHOT_FAILED",
    )
    with db.connect() as conn:
        state = conn.execute(
            sa.text("SELECT state, last_error_code FROM _emdash_media_usage_reconciliations")
        ).one()
    assert tuple(state) == ("failed", "MEDIA_USAGE_RECONCILIATION_ENTRY_FAILED")

    # The editor fixes the entry: capture reopens the run, which now completes.
    write(db, "UPDATE ec_posts SET draft_revision_id = NULL WHERE id = 'e00001'")
    converge(db, registered_posts.id)
    assert status_row(db, registered_posts.id)["status"] == "complete"
    assert actual_index(db) == expected_index(db)


def test_repair_rebuilds_a_collection_at_its_current_epoch(db, registered_posts) -> None:
    from media_usage_worker.pipeline.repair import repair_collection

    write(db, INSERT, entries(120))
    activate(db)
    seen: list[tuple[int, int]] = []
    result = repair_collection(db, "posts", progress=lambda done, total: seen.append((done, total)))
    assert (result.status, result.indexed, result.failed, result.skipped) == ("complete", 120, 0, 0)
    assert seen[-1] == (120, 120)
    status = status_row(db, registered_posts.id)
    assert status["status"] == "complete" and status["reconciliation_required"] == 0
    assert status["indexed_source_count"] == 120
    assert actual_index(db) == expected_index(db)
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM _emdash_media_usage_work")).scalar() == 0


def test_repair_racing_a_write_ends_stale_never_complete(db, registered_posts) -> None:
    from media_usage_worker.pipeline.repair import repair_collection

    write(db, INSERT, entries(120))
    activate(db)

    def write_during_repair(done: int, total: int) -> None:
        if done == 50:  # a host app writes while the repair is half-way
            write(db, "UPDATE ec_posts SET hero = 'changed' WHERE id = 'e00110'")

    result = repair_collection(db, "posts", progress=write_during_repair)
    assert (result.status, result.error_code) == ("stale", "CONTENT_USAGE_REPAIR_CONFLICT")
    status = status_row(db, registered_posts.id)
    assert (status["status"], status["last_error_code"], status["reconciliation_required"]) == (
        "stale",
        "CONTENT_USAGE_REPAIR_CONFLICT",
        1,
    )
    with db.connect() as conn:  # the write's work survived the repair's cleanup
        assert conn.execute(
            sa.text("SELECT content_id FROM _emdash_media_usage_work")
        ).scalars().all() == ["e00110"]
    converge(db, registered_posts.id)
    assert status_row(db, registered_posts.id)["status"] == "complete"
    assert actual_index(db) == expected_index(db)


def test_repair_refuses_without_active_capture(db, registered_posts) -> None:
    from media_usage_worker.domain.errors import CollectionNotFound, RepairNotPossible
    from media_usage_worker.pipeline.repair import repair_collection

    with pytest.raises(RepairNotPossible):
        repair_collection(db, "posts")
    with pytest.raises(CollectionNotFound):
        repair_collection(db, "nope")


class Killed(BaseException):
    """A worker killed mid-step: nothing after this point runs in that process."""


def test_a_worker_killed_while_recording_a_failed_run_leaves_it_recoverable(
    db, registered_posts, monkeypatch
) -> None:
    """The coordinator's "failed" and the coverage row are one transaction: a kill between
    the two statements undoes both, the lease expires, and another worker finishes the run."""
    write(db, INSERT, entries(3))
    write(db, "INSERT INTO ec_posts (id) VALUES ('')")  # fails at once (unusable id)
    activate(db)

    def killed_after_the_first_statement(*args, **kwargs):
        raise Killed

    monkeypatch.setattr(
        reconciliations, "_finish_failed_coverage", killed_after_the_first_statement
    )
    reconciler = Reconciler(db, defer_seconds=0)
    with pytest.raises(Killed):
        for _ in range(100):
            reconciler.tick()
            drain(db)
    monkeypatch.undo()
    with db.connect() as conn:
        state = conn.execute(
            sa.text("SELECT state FROM _emdash_media_usage_reconciliations")
        ).scalar_one()
    assert state == "leased"  # not "failed" with coverage left "running"
    assert status_row(db, registered_posts.id)["status"] == "running"

    write(db, "UPDATE _emdash_media_usage_reconciliations SET lease_expires_at = :p", {"p": PAST})
    converge(db, registered_posts.id)
    status = status_row(db, registered_posts.id)
    assert (status["status"], status["last_error_code"]) == (
        "partial",
        "MEDIA_USAGE_UNUSABLE_CONTENT_ID",
    )


def test_a_range_that_drains_a_backfill_takes_its_next_steps_at_once(db, registered_posts) -> None:
    """The workers feed the backfill themselves: one reconcile tick, then only key ranges. Each
    range that leaves the collection with few ranges wakes the reconciliation and runs its
    next steps (more ranges, then the sources phase and ``complete``) in the worker."""
    from media_usage_worker.domain.policy import Limits
    from media_usage_worker.pipeline.backfill import RangeRun
    from media_usage_worker.repository.reconciling.ranges import mark_for_dispatch

    write(db, INSERT, entries(1000))
    activate(db)
    woken: list[int] = []
    # No tick would come back within the test; ranges of 50 ids, twelve handed out at a time.
    reconciler = Reconciler(db, defer_seconds=60, range_size=50)

    def on_drained() -> None:
        woken.append(1)
        reconciler.tick(max_steps=4)  # a few steps at a time, as a worker's short turn would

    reconciler.tick(max_steps=3)  # start, and the first ranges
    for _ in range(200):
        sent = mark_for_dispatch(db, 0, 100)
        if not sent:
            break
        for collection_id, range_id, _ in sent:
            RangeRun(db, Limits(), on_drained=on_drained).run(collection_id, range_id)
    status = status_row(db, registered_posts.id)
    assert status["status"] == "complete", status
    assert len(woken) >= 3  # more ranges, then the phases after the drain
    assert actual_index(db) == expected_index(db)


def test_waking_needs_a_waiting_reconciliation_and_an_almost_drained_collection(
    db, registered_posts
) -> None:
    assert reconciliations.wake_if_drained(db, registered_posts.id) is False  # none to wake
    write(db, INSERT, entries(600))
    activate(db)
    Reconciler(db, defer_seconds=60, range_size=50).tick(max_steps=3)  # twelve ranges of 50
    with db.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE _emdash_media_usage_reconciliations "
                "SET next_attempt_at = '2999-01-01T00:00:00.000Z'"
            )
        )
    assert reconciliations.wake_if_drained(db, registered_posts.id) is False  # 600 to do
    drain(db)
    assert reconciliations.wake_if_drained(db, registered_posts.id) is True
    assert reconciliations.due_collection_ids(db, 10) == [registered_posts.id]


def test_a_wake_that_fails_costs_the_batch_nothing(db, registered_posts, monkeypatch) -> None:
    from media_usage_worker.domain.policy import Limits
    from media_usage_worker.domain.work import Item
    from media_usage_worker.pipeline.backfill import RangeOutcome, RangeRun
    from media_usage_worker.pipeline.batch import BatchRun
    from media_usage_worker.repository.reconciling.ranges import mark_for_dispatch
    from media_usage_worker.repository.work_queue.work import MediaUsageWorkRepository

    write(db, INSERT, entries(5))
    activate(db)
    Reconciler(db, defer_seconds=60).tick()
    write(db, INSERT, entries(5, prefix="w"))  # written during the run: work items

    def broken(*_args, **_kwargs):
        raise sa.exc.OperationalError("UPDATE", {}, Exception("the database went away"))

    monkeypatch.setattr(reconciliations, "wake_if_drained", broken)
    due = MediaUsageWorkRepository(db).find_due_work(100)
    called: list[int] = []
    results = BatchRun(db, Limits(), on_drained=lambda: called.append(1)).run(
        [Item(r.collection_id, r.content_id, r.work_version) for r in due]
    )
    assert {str(r.outcome) for r in results} == {"completed"} and len(results) == 5
    ((collection_id, range_id, _),) = mark_for_dispatch(db, 0, 10)
    report = RangeRun(db, Limits(), on_drained=lambda: called.append(1)).run(
        collection_id, range_id
    )
    assert (report.outcome, report.indexed) == (RangeOutcome.DONE, 5)
    assert called == []  # nothing was woken, and the next reconcile tick takes the step


def test_when_coverage_last_became_complete_is_kept_while_it_is_not(db, registered_posts) -> None:
    """The status row forgets ``completed_at`` once coverage leaves ``complete``; the overview
    still says when it last was (what the console tells an operator it may not clean up)."""
    from media_usage_worker.api import MediaUsage
    from media_usage_worker.domain.timestamps import seconds_between
    from media_usage_worker.pipeline.registry import request_reindex

    def last_complete() -> str | None:
        (posts,) = MediaUsage(db).status().collections
        return posts.last_complete_at

    write(db, INSERT, entries(20))
    activate(db)
    assert last_complete() is None  # never complete yet
    converge(db, registered_posts.id)
    completed = status_row(db, registered_posts.id)["completed_at"]
    noted = last_complete()
    # Written in the completing transaction, a statement later (the clock reads each time).
    assert completed is not None and noted is not None
    assert 0 <= seconds_between(completed, noted) < 5
    request_reindex(db, "posts")
    assert status_row(db, registered_posts.id)["completed_at"] is None
    assert last_complete() == noted  # remembered while it is not complete
    converge(db, registered_posts.id)
    again = last_complete()
    assert again is not None and again >= status_row(db, registered_posts.id)["completed_at"]
    assert again > noted


def test_a_tick_cut_short_with_a_step_still_due_says_so(db, registered_posts) -> None:
    write(db, INSERT, entries(30))
    activate(db)
    reconciler = Reconciler(db, defer_seconds=60)
    reconciler.tick(max_steps=1)  # the run starts; its scan is due at once
    assert reconciler.more_due is True
    reconciler.tick()  # the scan hands its range out, then waits for it: nothing is due
    assert reconciler.more_due is False
