"""A collection deleted under fire: while a host keeps writing the other collections
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
from media_usage_worker.pipeline.capture import activate
from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.repository.lifecycle import deletion as deletions
from media_usage_worker.repository.registry.collections import CollectionRegistry
from media_usage_worker.sample_content import create_sample_collections
from tests.chaos.pipeline import quiet, work_by_state
from tests.chaos.writer import ContentWriter
from tests.index_oracle import actual_index, expected_index
from tests.processes import ROOT, wait_for
from tests.support import NOTHING_LEFT, left_of

MAX_ENTRIES = 20_000
DOOMED = 400
KILLS = 6
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
    # The writer runs until the chaos is over, not for a number of entries: on a slow machine a
    # fixed amount of writing left time for fewer kills than the test asks for.
    writer = ContentWriter(url, MAX_ENTRIES, per_second=25)
    rng = random.Random(5)
    writer.start()
    deleter: subprocess.Popen[str] | None = None
    created_at_kill: list[int] = []
    started = time.monotonic()
    while len(created_at_kill) < KILLS:
        writer.join(timeout=KILL_EVERY)
        assert writer.is_alive(), writer.error or "the writer ran out of entries"
        if deleter is None and time.monotonic() - started > 3:
            deleter = subprocess.Popen(
                [sys.executable, "-m", "media_usage_worker", "collections", "delete", "doomed",
                 "--force", "--json", "--database-url", url],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
        victim = rng.randrange(len(pool))
        fleet.kill(pool[victim])
        pool[victim] = fleet.worker(concurrency=1)
        created_at_kill.append(writer.created)
    writer.stop.set()
    writer.join(timeout=60)
    assert writer.error is None, writer.error
    assert deleter is not None
    out, err = deleter.communicate(timeout=120)
    assert deleter.returncode == 0, err
    assert json.loads(out)["outcome"] == "deleted"
    # The chaos really happened: every kill fell while the host was still writing.
    assert created_at_kill[-1] > created_at_kill[0] > 0

    wait_for(lambda: not deletions.standing(engine) and quiet(engine), timeout=240, interval=1)
    assert left_of(engine, doomed.id, "doomed") == NOTHING_LEFT
    assert work_by_state(engine) == {}
    expected = expected_index(engine)
    assert expected and actual_index(engine) == expected
    engine.dispose()
