"""Reconciliation driven only by beat ticks and worker subprocesses."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from repository.activation import activate
from repository.collections import CollectionRegistry
from tests.index_oracle import (
    actual_index,
    actual_source_keys,
    expected_index,
    expected_source_keys,
)
from tests.processes import wait_for
from tests.support import SAMPLE_FIELDS, status_row


def reconcile_pre_existing(db: sa.Engine, processes, entries: int, timeout: float) -> None:
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
