"""Deleting a collection, on both dialects: tombstone, fenced front phases, back phases
in batches, resumable after a kill in any of them, and nothing of the collection left."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from media_usage_worker.cli import main
from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.errors import CollectionExists, DeletionConflict
from media_usage_worker.pipeline.deletion import DeletionProcessor, delete_collection, run_step
from media_usage_worker.repository.base.schema import collection_deletions, work
from media_usage_worker.repository.index.usage import usage_count
from media_usage_worker.repository.lifecycle import deletion as deletions
from media_usage_worker.repository.registry.collections import CollectionRegistry
from tests.index_oracle import actual_index, expected_index
from tests.processes import ROOT, wait_for
from tests.support import NOTHING_LEFT as NOTHING
from tests.support import active_collection, drain, left_of, mark_coverage_complete

HERO = [FieldDefinition("hero", "Hero", "image")]


def write(engine: sa.Engine, slug: str, content_id: str, hero: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text(f"INSERT INTO ec_{slug} (id, hero) VALUES (:id, :hero)"),
            {"id": content_id, "hero": hero},
        )


def site(engine: sa.Engine, entries: int = 4) -> Any:
    """posts (doomed) and pages (kept), both indexed; posts also has queued work."""
    posts = active_collection(engine, "posts", HERO)
    active_collection(engine, "pages", HERO)
    for i in range(entries):
        write(engine, "posts", f"p{i}", f"m-post-{i}")
        write(engine, "pages", f"g{i}", "m-page")
    drain(engine)
    for i in range(entries):
        write(engine, "posts", f"q{i}", "m-queued")  # captured, not yet processed
    mark_coverage_complete(engine)
    return posts


def finish(engine: sa.Engine, lease_seconds: int = 300) -> None:
    processor = DeletionProcessor(engine, lease_seconds=lease_seconds, batch_size=3)
    for _ in range(200):
        if not deletions.standing(engine):
            return
        processor.tick()
    raise AssertionError("the deletion did not finish")


def test_deleting_an_empty_collection_leaves_nothing_and_frees_the_slug(db: sa.Engine) -> None:
    posts = active_collection(db, "posts", HERO)
    result = delete_collection(db, "posts")
    assert (result.outcome, result.phase) == ("deleted", "work")
    assert CollectionRegistry(db).get("posts") is None
    with pytest.raises(CollectionExists, match="still being deleted"):
        CollectionRegistry(db).create_collection("posts", "Posts", HERO)
    finish(db)
    assert left_of(db, posts.id, "posts") == NOTHING
    again = active_collection(db, "posts", HERO)
    write(db, "posts", "e1", "m1")
    assert again.id != posts.id


def test_content_without_force_is_refused_and_changes_nothing(db: sa.Engine) -> None:
    posts = site(db)
    before = snapshot(db)
    result = delete_collection(db, "posts")
    assert result.outcome == "has_content"
    assert snapshot(db) == before
    write(db, "posts", "later", "m-later")  # capture still active: the write is captured
    assert left_of(db, posts.id, "posts")["tombstone"] == 0


def test_a_forced_delete_removes_the_content_and_its_index_and_keeps_the_rest(
    db: sa.Engine,
) -> None:
    posts = site(db)
    assert usage_count(db, "m-post-1")[1] == 1
    result = delete_collection(db, "posts", force=True)
    assert result.outcome == "deleted"
    # The entries stop counting at once, before the workers remove anything.
    assert left_of(db, posts.id, "posts")["sources"] > 0
    assert usage_count(db, "m-post-1")[1] == 0
    with pytest.raises(sa.exc.DBAPIError):
        write(db, "posts", "late", "m-late")  # the table is gone
    finish(db)
    assert left_of(db, posts.id, "posts") == NOTHING
    assert usage_count(db, "m-page")[1] == 4
    assert actual_index(db) == expected_index(db)  # pages' index untouched


def test_a_sources_step_takes_every_whole_source_that_fits_and_splits_a_larger_one(
    db: sa.Engine,
) -> None:
    images = [FieldDefinition(f"i{n}", f"Image {n}", "image") for n in range(7)]
    posts = active_collection(db, "posts", images)
    with db.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO ec_posts (id, i0, i1, i2, i3, i4, i5, i6) "
                    "VALUES ('big', 'm0', 'm1', 'm2', 'm3', 'm4', 'm5', 'm6')")
        )  # fmt: skip
        for n in range(4):
            conn.execute(sa.text(f"INSERT INTO ec_posts (id, i0) VALUES ('small{n}', 'm{n}')"))
    drain(db)
    assert delete_collection(db, "posts", force=True).outcome == "deleted"
    held = deletions.claim(db, posts.id, lease_seconds=300)
    assert held is not None
    left = []
    while held.phase in ("work", "sources"):
        step = run_step(db, held, batch_size=3)
        assert isinstance(step, deletions.Tombstone)
        held = step
        if held.phase == "sources":
            counts = left_of(db, posts.id, "posts")
            left.append((counts["sources"], counts["occurrences"]))
    # The large source (7 occurrences, first in key order) takes three steps, the cursor
    # keeping its place; then three small ones go in one step, the last one in the next.
    assert left == [(5, 11), (5, 8), (5, 5), (4, 4), (1, 1), (0, 0)]
    assert held.phase == "status"
    assert left_of(db, posts.id, "posts")["orphan occurrences"] == 0


def test_a_tombstone_alone_stops_its_entries_counting(db: sa.Engine) -> None:
    posts = site(db)
    deletions.create(db, posts.id, "posts", force=True)
    assert usage_count(db, "m-post-1")[1] == 0
    with pytest.raises(DeletionConflict):
        delete_collection(db, "posts")  # the standing deletion is forced: no silent change


def test_a_write_racing_the_fence_is_captured_or_fails_never_half(db: sa.Engine) -> None:
    posts = active_collection(db, "posts", HERO)
    committed: list[str] = []
    refused: list[str] = []
    stop = threading.Event()
    started = threading.Event()
    met_the_fence = threading.Event()

    def writer() -> None:
        engine = sa.create_engine(db.url, poolclass=sa.NullPool)
        i = 0
        while not stop.is_set():
            content_id = f"w{i:05d}"
            i += 1
            try:
                write(engine, "posts", content_id, "m-race")
                committed.append(content_id)
            except sa.exc.DBAPIError as error:
                refused.append(str(error.orig))
                met_the_fence.set()
            if len(committed) >= 5:
                started.set()
        engine.dispose()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert started.wait(30)
        assert delete_collection(db, "posts", force=True).outcome == "deleted"
        # The writer goes on until a write of its own is refused (at the latest, by the
        # dropped table), so the race is seen whatever the threads' timing.
        assert met_the_fence.wait(30)
    finally:
        stop.set()
        thread.join(30)
    with db.connect() as conn:
        queued = set(
            conn.execute(
                sa.select(work.c.content_id).where(work.c.collection_id == posts.id)
            ).scalars()
        )
    assert set(committed) <= queued  # every write that committed was captured
    assert all("capture inactive" in r or "ec_posts" in r for r in refused), refused[:3]
    finish(db)
    assert left_of(db, posts.id, "posts") == NOTHING


def test_two_deleters_at_once(db: sa.Engine) -> None:
    posts = site(db)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def deleter() -> None:
        engine = sa.create_engine(db.url)
        try:
            barrier.wait(10)
            outcomes.append(delete_collection(engine, "posts", force=True).outcome)
        except BaseException as error:
            errors.append(error)
        finally:
            engine.dispose()

    threads = [threading.Thread(target=deleter) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    # The second found the first holding it (in_progress), or done (already_deleted), or
    # took over a front phase the first had not finished (both deleted).
    assert not errors, errors
    assert "deleted" in outcomes
    assert set(outcomes) <= {"deleted", "in_progress", "already_deleted"}
    finish(db)
    assert left_of(db, posts.id, "posts") == NOTHING


KILLER = """
import os, signal, sys, time
from media_usage_worker.pipeline.deletion import DeletionProcessor
from media_usage_worker.repository.lifecycle import deletion as deletions
from media_usage_worker.repository.base.db import create_engine

url, phase = sys.argv[1], sys.argv[2]
seen = {"n": 0}
move, leftovers = deletions._move_held, deletions._leftovers

def die():  # mid-transaction: what the step wrote is rolled back
    os.kill(os.getpid(), signal.SIGKILL)

def moving(conn, t, **values):
    moved = move(conn, t, **values)
    if t.phase == phase and phase in ("work", "sources"):
        seen["n"] += 1
        if seen["n"] == 2:  # the first batch committed, the second dies half-way
            die()
    return moved

def checking(conn, t):
    if t.phase == phase:
        die()
    return leftovers(conn, t)

deletions._move_held, deletions._leftovers = moving, checking
processor = DeletionProcessor(create_engine(url), lease_seconds=1, batch_size=2, budget_seconds=60)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    processor.tick()
    time.sleep(0.1)
sys.exit("never reached phase " + phase)
"""


def test_a_worker_killed_in_every_back_phase_leaves_a_deletion_that_finishes(
    db: sa.Engine, migrated_url: str
) -> None:
    posts = site(db, entries=5)
    assert delete_collection(db, "posts", force=True, lease_seconds=1).outcome == "deleted"
    for phase in ("work", "sources", "status", "finalize"):
        killed = subprocess.run(
            [sys.executable, "-c", KILLER, migrated_url, phase],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert killed.returncode == -signal.SIGKILL, (phase, killed.stderr[-2000:])
        tombstone = deletions.find(db, collection_id=posts.id)
        assert tombstone is not None and tombstone.phase == phase
        assert tombstone.state == "leased"  # its holder is dead; the lease runs out
    wait_for(lambda: bool(deletions.due_ids(db, 1)), timeout=30)
    finish(db, lease_seconds=1)
    assert left_of(db, posts.id, "posts") == NOTHING


def test_failures_are_retried_then_failed_and_an_operator_retries(
    db: sa.Engine, migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    posts = site(db)
    assert delete_collection(db, "posts", force=True).outcome == "deleted"

    def broken(*_: Any) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(deletions, "delete_work_batch", broken)
    processor = DeletionProcessor(db)
    for attempt in range(1, 6):
        with db.begin() as conn:  # due now (the backoff is checked below, not waited out)
            conn.execute(
                collection_deletions.update().values(next_attempt_at="2000-01-01T00:00:00.000Z")
            )
        processor.tick()
        tombstone = deletions.find(db, collection_id=posts.id)
        assert tombstone is not None and tombstone.attempt_count == attempt
        assert tombstone.last_error_code == "MEDIA_USAGE_COLLECTION_DELETION_FAILED"
        assert tombstone.state == ("failed" if attempt == 5 else "retry")
    monkeypatch.undo()

    runner = CliRunner()
    listed = runner.invoke(
        main, ["collections", "deletions", "--json", "--database-url", migrated_url]
    )
    assert listed.exit_code == 0, listed.output
    assert '"collection_slug": "posts"' in listed.output and "lease_token" not in listed.output
    retried = runner.invoke(
        main, ["collections", "retry-deletion", "posts", "--database-url", migrated_url]
    )
    assert retried.exit_code == 0, retried.output
    again = runner.invoke(
        main, ["collections", "retry-deletion", "posts", "--database-url", migrated_url]
    )
    assert again.exit_code == 1  # pending now: nothing to reopen
    finish(db)
    assert left_of(db, posts.id, "posts") == NOTHING


def test_the_backoff_has_no_jitter(db: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    from media_usage_worker.domain.deletion import retry_delay_seconds
    from media_usage_worker.domain.timestamps import seconds_between
    from tests.support import db_time

    assert [retry_delay_seconds(a) for a in range(7)] == [30, 60, 120, 240, 480, 900, 900]
    posts = site(db)
    delete_collection(db, "posts", force=True)
    monkeypatch.setattr(deletions, "delete_work_batch", lambda *_: 1 / 0)
    before = db_time(db)
    DeletionProcessor(db).tick()
    tombstone = deletions.find(db, collection_id=posts.id)
    assert tombstone is not None
    assert 30 <= seconds_between(before, tombstone.next_attempt_at) < 32


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["posts"], 1, "COLLECTION_HAS_CONTENT"),
        (["nothere"], 1, "No collection has slug 'nothere'"),
        (["Posts"], 2, "Collection slug 'Posts'"),
    ],
)
def test_the_cli_refuses_with_one_line(
    db: sa.Engine, migrated_url: str, args: list[str], code: int, says: str
) -> None:
    site(db)
    before = snapshot(db)
    done = CliRunner().invoke(
        main, ["collections", "delete", *args, "--database-url", migrated_url]
    )
    assert done.exit_code == code
    assert says in done.output and len(done.output.strip().splitlines()) == 1
    assert snapshot(db) == before


def test_the_cli_deletes_with_force(db: sa.Engine, migrated_url: str) -> None:
    posts = site(db)
    done = CliRunner().invoke(
        main,
        ["collections", "delete", "posts", "--force", "--json", "--database-url", migrated_url],
    )
    assert done.exit_code == 0, done.output
    assert '"outcome": "deleted"' in done.output
    status = CliRunner().invoke(main, ["status", "--database-url", migrated_url])
    assert "DELETING" in status.output and "posts" in status.output
    finish(db)
    assert left_of(db, posts.id, "posts") == NOTHING


def snapshot(engine: sa.Engine) -> dict[str, list]:
    with engine.connect() as conn:
        return {
            table: sorted(map(repr, conn.execute(sa.text(f'SELECT * FROM "{table}"')).all()))
            for table in sa.inspect(conn).get_table_names()
        }


def test_rules_rows_written_while_the_deletion_ran_are_removed_too(db: sa.Engine) -> None:
    """A rules change that read the collection before its registry row went may still write
    its rules rows; the deletion's last check finds them and removes them."""
    from media_usage_worker.repository.base.schema import reference_paths, rules_state

    posts = site(db)
    assert delete_collection(db, "posts", force=True).outcome == "deleted"
    with db.begin() as conn:  # what the racing change wrote after drop_registry
        conn.execute(rules_state.insert().values(collection_id=posts.id, rules_revision=3))
        conn.execute(
            reference_paths.insert().values(
                collection_id=posts.id, path="hero.x", field_slug="hero"
            )
        )
    finish(db)
    assert left_of(db, posts.id, "posts") == NOTHING


def test_a_rules_change_holding_the_collection_makes_the_registry_step_wait(
    db: sa.Engine, dialect: str
) -> None:
    """The race: a rules change reads the collection list, the deletion drops the registry
    row, the change writes its rules rows and commits. The change's share lock on the rows it
    read makes the registry step wait for it, so the step removes what it wrote."""
    if dialect == "sqlite":
        pytest.skip("SQLite serialises writers: the two cannot overlap")
    import unittest.mock

    from media_usage_worker.repository.registry import rules

    posts = site(db)
    deletions.create(db, posts.id, "posts", True)
    fenced = run_step(db, deletions.claim(db, posts.id, 300))
    assert isinstance(fenced, deletions.Tombstone) and fenced.phase == "registry"
    deletions.release(db, fenced)

    read, proceed = threading.Event(), threading.Event()
    real = rules.count_rules_change

    def after_reading(conn, changed):
        read.set()  # the collection list is read (and held); the rows are not written yet
        assert proceed.wait(30)
        real(conn, changed)

    steps: list[object] = []
    with unittest.mock.patch.object(rules, "count_rules_change", after_reading):
        change = threading.Thread(
            target=lambda: rules.add_media_url_prefix(db, "https://cdn.example.com/m/")
        )
        change.start()
        assert read.wait(30)
        registry = threading.Thread(
            target=lambda: steps.append(run_step(db, deletions.claim(db, posts.id, 300)))
        )
        registry.start()

        def a_backend_waits_on_a_lock() -> bool:
            with db.connect() as conn:
                return bool(
                    conn.execute(
                        sa.text(
                            "SELECT count(*) FROM pg_stat_activity "
                            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                        )
                    ).scalar_one()
                )

        wait_for(a_backend_waits_on_a_lock, timeout=30, interval=0.05)
        assert not steps  # the registry step waits for the change
        proceed.set()
        change.join(30)
        registry.join(30)
    (step,) = steps
    assert isinstance(step, deletions.Tombstone) and step.phase == "table"
    with db.connect() as conn:
        stray = conn.execute(
            sa.text(
                "SELECT count(*) FROM _media_usage_worker_rules_state WHERE collection_id = :c"
            ),
            {"c": posts.id},
        ).scalar_one()
    assert stray == 0  # the registry step removed what the change wrote
    deletions.release(db, step)
    finish(db)
    assert left_of(db, posts.id, "posts") == NOTHING
