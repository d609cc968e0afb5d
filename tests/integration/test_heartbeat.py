"""A long item keeps its lease while its worker lives; a fenced holder writes nothing."""

from __future__ import annotations

import threading

import sqlalchemy as sa

from domain.content_model import FieldDefinition
from repository.processor import Heartbeat, process_work_item
from repository.refresh import refresh_entry
from repository.work import MediaUsageWorkRepository
from tests.support import PAST, active_collection, get_work, set_work

FIELDS = [FieldDefinition("hero", "Hero", "image")]


def sql(engine: sa.Engine, statement: str) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(statement))


def test_heartbeat_keeps_a_long_item_leased(db: sa.Engine) -> None:
    posts = active_collection(db, "posts", FIELDS)
    sql(db, "INSERT INTO ec_posts (id, hero) VALUES ('e1', 'm1')")
    repo = MediaUsageWorkRepository(db)
    release = threading.Event()
    expiries: list[str] = []

    def slow_refresh(engine, entry, limits, fence):
        # Outlive the 1 s lease several times over while the test watches the lease move.
        assert release.wait(timeout=30)
        return refresh_entry(engine, entry, limits, fence)

    result: list = []
    worker = threading.Thread(
        target=lambda: result.append(
            process_work_item(
                db,
                collection_id=posts.id,
                content_id="e1",
                work_version=1,
                lease_seconds=1,
                refresh=slow_refresh,
                heartbeat=Heartbeat(every_seconds=0.2, max_seconds=30),
            )
        )
    )
    worker.start()
    deadline = threading.Event()
    while len(set(expiries)) < 4 and not deadline.wait(0.1):
        row = get_work(db, posts.id, "e1")
        if row and row["state"] == "leased":
            expiries.append(row["lease_expires_at"])
            # Nobody can take the item over while the heartbeat renews it.
            assert (
                repo.claim_work(
                    collection_id=posts.id,
                    content_id="e1",
                    work_version=1,
                    lease_duration_seconds=60,
                )
                is None
            )
    release.set()
    worker.join(timeout=30)
    assert result[0].outcome == "completed"
    assert len(set(expiries)) >= 4 and expiries == sorted(expiries)


def test_a_holder_that_lost_its_lease_writes_no_index(db: sa.Engine) -> None:
    posts = active_collection(db, "posts", FIELDS)
    sql(db, "INSERT INTO ec_posts (id, hero) VALUES ('e1', 'm1')")

    def refresh_after_losing_the_lease(engine, entry, limits, fence):
        set_work(db, posts.id, "e1", lease_expires_at=PAST)  # the lease ran out meanwhile
        return refresh_entry(engine, entry, limits, fence)

    result = process_work_item(
        db,
        collection_id=posts.id,
        content_id="e1",
        work_version=1,
        refresh=refresh_after_losing_the_lease,
    )
    # It could neither write the index nor record a retry: the row is no longer its to touch.
    assert result.outcome == "superseded" and result.error_code == "MEDIA_USAGE_GENERATION_CONFLICT"
    with db.connect() as conn:
        assert (
            conn.execute(sa.text("SELECT count(*) FROM _emdash_media_usage_sources")).scalar() == 0
        )
        assert conn.execute(sa.text("SELECT count(*) FROM _emdash_media_usage")).scalar() == 0
