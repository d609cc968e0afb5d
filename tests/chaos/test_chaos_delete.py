"""A collection deleted under fire (issue 24): while a host keeps writing the other collections
and a worker is SIGKILLed every 2 s, one collection with content is deleted. Nothing of it may
be left, and the other collections' index must match their content exactly."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.repository import deletions
from media_usage_worker.repository.activation import activate
from media_usage_worker.repository.collections import CollectionRegistry
from media_usage_worker.repository.db import create_engine
from media_usage_worker.repository.sample_content import create_sample_collections
from tests.chaos.pipeline import quiet, work_by_state
from tests.chaos.writer import ContentWriter
from tests.index_oracle import actual_index, expected_index
from tests.processes import ROOT, wait_for
from tests.support import NOTHING_LEFT, left_of

ENTRIES = 600
DOOMED = 400
KILL_EVERY = 2.0


@pytest.mark.timeout(600)
def test_a_collection_deleted_while_others_are_written_leaves_nothing(
    dialect: str, chaos_database, fleet, tmp_path: Path
) -> None:
    url, _ = chaos_database
    engine = create_engine(url)
    create_sample_collections(engine)
    doomed = CollectionRegistry(engine).create_collection(
        "doomed", "Doomed", [FieldDefinition("hero", "Hero", "image")]
    )
    activate(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO ec_doomed (id, hero) VALUES (:id, :hero)"),
            [{"id": f"d{i:04d}", "hero": f"media-{i % 50:04d}"} for i in range(DOOMED)],
        )
    # A killed worker's deletion is resumed after this lease, not emdash's 300 s.
    fleet.env["MEDIA_USAGE_DELETION_LEASE_SECONDS"] = "2"
    pool = [fleet.worker(concurrency=1) for _ in range(2)]
    fleet.beat()
    writer = ContentWriter(url, ENTRIES, per_second=25)
    rng = random.Random(5)
    writer.start()
    deleted = None
    kills = 0
    started = time.monotonic()
    while writer.is_alive():
        writer.join(timeout=KILL_EVERY)
        if deleted is None and time.monotonic() - started > 3:
            deleted = subprocess.run(
                [sys.executable, "-m", "media_usage_worker", "collections", "delete", "doomed",
                 "--force", "--json", "--database-url", url],
                cwd=ROOT, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
        victim = rng.randrange(len(pool))
        fleet.kill(pool[victim])
        pool[victim] = fleet.worker(concurrency=1)
        kills += 1
    assert writer.error is None, writer.error
    assert deleted is not None and deleted.returncode == 0, deleted and deleted.stderr
    assert json.loads(deleted.stdout)["outcome"] == "deleted"

    wait_for(lambda: not deletions.standing(engine) and quiet(engine), timeout=240, interval=1)
    assert left_of(engine, doomed.id, "doomed") == NOTHING_LEFT
    assert work_by_state(engine) == {}
    expected = expected_index(engine)
    assert expected and actual_index(engine) == expected
    assert kills >= 5
    engine.dispose()
