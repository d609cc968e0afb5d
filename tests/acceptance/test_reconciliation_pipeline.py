"""Reconciliation driven only by beat ticks and worker subprocesses."""

from __future__ import annotations

import json
import random
import threading

import pytest
import sqlalchemy as sa

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.pipeline.capture import activate
from media_usage_worker.repository.registry.collections import CollectionRegistry
from tests.index_oracle import (
    actual_index,
    actual_source_keys,
    expected_index,
    expected_source_keys,
)
from tests.processes import cli, wait_for
from tests.support import SAMPLE_FIELDS, status_row


def written_before_activation(db: sa.Engine, entries: int):
    """The sample collection with ``entries`` entries written while capture is off."""
    posts = CollectionRegistry(db).create_collection("posts", "Posts", SAMPLE_FIELDS)
    rows = [
        {
            "id": f"e{i:05d}",
            "title": f"Entry {i}",
            "hero": f"m{i % 97}",
            "gallery": json.dumps([{"image": f"g{i % 31}"}, {"image": f"m{i % 7}"}]),
        }
        for i in range(entries)
    ]
    with db.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO ec_posts (id, title, hero, gallery) "
                "VALUES (:id, :title, :hero, :gallery)"
            ),
            rows,
        )
    return posts


def reconcile_pre_existing(db: sa.Engine, processes, entries: int, timeout: float) -> None:
    posts = written_before_activation(db, entries)
    activate(db)
    processes.env["MEDIA_USAGE_RECONCILE_SECONDS"] = "1"
    processes.env["MEDIA_USAGE_RECONCILE_DEFER_SECONDS"] = "1"
    # The suite's bound of 100 queued messages caps a 1 s tick at 100 items/s, about what two
    # workers drain; 200 keeps them busy and still drains well inside the 3 s message TTL.
    processes.env["MEDIA_USAGE_MAX_QUEUED"] = "200"
    processes.worker(concurrency=2)
    processes.beat()
    wait_for(lambda: status_row(db, posts.id)["status"] == "complete", timeout=timeout, interval=1)
    status = status_row(db, posts.id)
    assert status["reconciliation_required"] == 0
    assert len(actual_source_keys(db)) == entries
    assert actual_source_keys(db) == expected_source_keys(db)
    assert actual_index(db) == expected_index(db)


@pytest.mark.timeout(900)
def test_ten_thousand_pre_existing_entries_reach_complete_coverage(db, processes) -> None:
    """The issue's full size: about two minutes per dialect with two worker processes."""
    reconcile_pre_existing(db, processes, 10_000, timeout=720)


def test_activation_by_the_cli_is_backfilled_by_a_worker_without_any_tick(
    db, processes, migrated_url
) -> None:
    """No beat: ``media-usage activate`` sends the first reconciliation tick itself, and the
    worker feeds itself the rest (each page a step enqueues is sent at once, and the batch that
    drains a collection wakes its next step), so the backfill reaches ``complete`` with the
    default intervals and no tick at all. A send is capped at 500 items here, so the backlog
    also relies on each batch topping the queue up."""
    posts = written_before_activation(db, 3000)
    processes.env["MEDIA_USAGE_TICK_BUDGET"] = "500"
    processes.worker(concurrency=2)
    ran = cli("activate", url=migrated_url)
    assert ran.code == 0, ran.err
    wait_for(lambda: status_row(db, posts.id)["status"] == "complete", timeout=180, interval=0.5)
    assert status_row(db, posts.id)["reconciliation_required"] == 0
    assert actual_source_keys(db) == expected_source_keys(db)
    assert actual_index(db) == expected_index(db)


def test_a_collection_indexed_under_older_rules_is_reindexed_by_worker_and_beat(
    db, processes
) -> None:
    """Complete under extraction rules that missed gallery blocks: the real beat and worker
    mark it stale ("extraction rules changed") and bring it back to complete under the
    running rules, the gallery images indexed, with no operator step."""
    from media_usage_worker.domain.rules import EXTRACTION_VERSION
    from media_usage_worker.repository.index.usage import usage_count
    from tests.support import drain, mark_coverage_complete

    posts = CollectionRegistry(db).create_collection(
        "posts", "Posts", [*SAMPLE_FIELDS, FieldDefinition("body", "Body", "portableText")]
    )
    activate(db)
    body = [{"_type": "gallery", "images": [{"asset": {"_ref": f"g{i}"}} for i in range(3)]}]
    with db.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO ec_posts (id, status, hero, body) "
                    "VALUES (:id, 'published', :hero, :body)"),
            [{"id": f"e{i}", "hero": f"m{i}", "body": json.dumps(body)} for i in range(20)],
        )  # fmt: skip
    drain(db)
    mark_coverage_complete(db)
    with db.begin() as conn:  # what the previous rules left behind
        conn.execute(sa.text("DELETE FROM _emdash_media_usage WHERE field_path LIKE 'body%'"))
        conn.execute(sa.text("UPDATE _emdash_media_usage_sources SET source_fingerprint = 'v1'"))
        conn.execute(
            sa.text("UPDATE _media_usage_worker_rules_state SET indexed_extraction_version = 1 "
                    "WHERE collection_id = :id"), {"id": posts.id},
        )  # fmt: skip
    assert usage_count(db, "g0")[1] is None  # not trusted under the running rules

    processes.env["MEDIA_USAGE_RECONCILE_SECONDS"] = "1"
    processes.env["MEDIA_USAGE_RECONCILE_DEFER_SECONDS"] = "1"
    processes.worker(concurrency=2)
    processes.beat()
    wait_for(lambda: usage_count(db, "g0")[1] == 20, timeout=120, interval=0.5)
    status = status_row(db, posts.id)
    assert (status["status"], status["reconciliation_required"]) == ("complete", 0)
    assert "'rules_changed': 1" in processes.logs()  # the reconcile tick's summary said why
    assert usage_count(db, "g0")[0].scopes[0].rules == f"extraction-{EXTRACTION_VERSION}.rules-0"
    assert actual_index(db) == expected_index(db)


def test_a_rule_added_through_the_cli_is_indexed_by_worker_and_beat(
    db, processes, migrated_url
) -> None:
    """A complete collection whose custom block keeps media by bare id (a file's URL would be
    a use wherever it is written; an id is one only where a rule says so): an operator declares
    the path with the CLI while the real worker and beat run; coverage leaves ``complete`` and
    comes back with the block's media indexed, with no other step."""
    import subprocess
    import sys

    from media_usage_worker.domain.rules import EXTRACTION_VERSION
    from media_usage_worker.repository.base.schema import media
    from media_usage_worker.repository.index.usage import usage_count

    posts = CollectionRegistry(db).create_collection(
        "posts", "Posts", [FieldDefinition("body", "Body", "portableText")]
    )
    activate(db)
    with db.begin() as conn:
        conn.execute(media.insert().values(
            id="m-photo", filename="photo.jpg", mime_type="image/jpeg", storage_key="photo.jpg"
        ))  # fmt: skip
        items = [{"imageUrl": "m-photo"}]
        conn.execute(
            sa.text("INSERT INTO ec_posts (id, status, body) VALUES (:id, 'published', :body)"),
            [{"id": f"e{i}", "body": json.dumps([{"_type": "promo", "items": items}])}
             for i in range(20)],
        )  # fmt: skip
    processes.env["MEDIA_USAGE_RECONCILE_SECONDS"] = "1"
    processes.env["MEDIA_USAGE_RECONCILE_DEFER_SECONDS"] = "1"
    processes.worker(concurrency=2)
    processes.beat()
    wait_for(lambda: usage_count(db, "m-photo")[0].status == "complete", timeout=120, interval=0.5)
    assert usage_count(db, "m-photo")[1] == 0  # "used nowhere" until the block is declared

    added = subprocess.run(
        [sys.executable, "-m", "media_usage_worker", "rules", "add", "posts",
         "body[_type=promo].items[].imageUrl", "--database-url", migrated_url],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    # Stale from the rule's own transaction: never again "used nowhere". The command also sent
    # the first reconciliation tick, so the workers may have re-indexed the 20 entries already.
    assert usage_count(db, "m-photo")[1] in (None, 20)
    wait_for(lambda: usage_count(db, "m-photo")[1] == 20, timeout=120, interval=0.5)
    status = status_row(db, posts.id)
    assert (status["status"], status["reconciliation_required"]) == ("complete", 0)
    coverage = usage_count(db, "m-photo")[0]
    assert coverage.scopes[0].rules == f"extraction-{EXTRACTION_VERSION}.rules-1"
    assert actual_index(db) == expected_index(db)


class SteadyWriter(threading.Thread):
    """A host that never stops: every ``1/per_second`` s it creates, edits or deletes an entry
    of ``posts`` by plain SQL and sends ``media_usage.after_write`` for it (the fast path)."""

    def __init__(self, db: sa.Engine, existing: int, per_second: float) -> None:
        super().__init__(daemon=True)
        self.db, self.existing, self.pause = db, existing, 1 / per_second
        self.rng = random.Random(3)
        self.stop = threading.Event()
        self.written = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        from media_usage_worker.tasks.dispatch import after_write

        try:
            while not self.stop.wait(self.pause):
                content_id = self._write()
                after_write("posts", content_id)
                self.written += 1
        except BaseException as exc:  # surfaced by the test, never swallowed
            self.error = exc

    def _write(self) -> str:
        roll, n = self.rng.random(), self.written
        with self.db.begin() as conn:
            if roll < 0.5:
                content_id = f"w{n:05d}"
                conn.execute(
                    sa.text("INSERT INTO ec_posts (id, hero, gallery) VALUES (:id, :m, :g)"),
                    {"id": content_id, "m": f"m{n % 89}",
                     "g": json.dumps([{"image": f"g{n % 13}"}])},
                )  # fmt: skip
            else:
                content_id = f"e{self.rng.randrange(self.existing):05d}"
                if roll < 0.9:
                    conn.execute(
                        sa.text("UPDATE ec_posts SET hero = :m WHERE id = :id"),
                        {"id": content_id, "m": f"x{n % 53}"},
                    )
                else:
                    conn.execute(sa.text("DELETE FROM ec_posts WHERE id = :id"), {"id": content_id})
        return content_id


def _complete(db: sa.Engine, collection_id: str) -> bool:
    status = status_row(db, collection_id)
    return status["status"] == "complete" and status["reconciliation_required"] == 0


@pytest.mark.timeout(900)
def test_a_backfill_reaches_complete_while_the_site_never_stops_writing(
    db, processes, celery_app
) -> None:
    """The writer runs from before activation until after ``complete`` was seen: the run is
    never restarted by a write, ends while they go on, and the index is exact."""
    posts = written_before_activation(db, 3000)
    processes.env["MEDIA_USAGE_RECONCILE_SECONDS"] = "1"
    processes.env["MEDIA_USAGE_RECONCILE_DEFER_SECONDS"] = "1"
    processes.env["MEDIA_USAGE_MAX_QUEUED"] = "200"
    processes.worker(concurrency=2)
    processes.beat()
    writer = SteadyWriter(db, 3000, per_second=4)
    writer.start()
    try:
        wait_for(lambda: writer.written >= 4, timeout=30, interval=0.05)
        activate(db)
        wait_for(lambda: _complete(db, posts.id), timeout=600, interval=0.05)
        seen_at = writer.written
        # Still writing after: ``complete`` was reached with the writer running.
        wait_for(lambda: writer.written >= seen_at + 8, timeout=30, interval=0.05)
    finally:
        writer.stop.set()
        writer.join(30)
    assert writer.error is None, writer.error
    assert writer.is_alive() is False and seen_at >= 8
    wait_for(lambda: _complete(db, posts.id), timeout=120, interval=0.2)
    assert actual_source_keys(db) == expected_source_keys(db)
    mismatches = actual_index(db) ^ expected_index(db)
    assert mismatches == set(), sorted(mismatches)[:10]
