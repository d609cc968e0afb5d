"""A long item keeps its lease while its worker lives; a fenced holder writes nothing."""

from __future__ import annotations

import threading

import sqlalchemy as sa

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.pipeline.lease_keeper import LeaseKeeper
from media_usage_worker.pipeline.process import Heartbeat, process_work_item
from media_usage_worker.repository.work_queue.work import MediaUsageWorkRepository
from tests.processes import wait_for
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

    def slow_item():
        # Outlive the 1 s lease several times over while the test watches the lease move.
        assert release.wait(timeout=30)

    result: list = []
    worker = threading.Thread(
        target=lambda: result.append(
            process_work_item(
                db,
                collection_id=posts.id,
                content_id="e1",
                work_version=1,
                lease_seconds=1,
                before_write=slow_item,
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

    def lose_the_lease():
        set_work(db, posts.id, "e1", lease_expires_at=PAST)  # the lease ran out meanwhile

    result = process_work_item(
        db,
        collection_id=posts.id,
        content_id="e1",
        work_version=1,
        before_write=lose_the_lease,
    )
    # It could neither write the index nor record a retry: the row is no longer its to touch.
    assert result.outcome == "superseded" and result.error_code == "MEDIA_USAGE_GENERATION_CONFLICT"
    with db.connect() as conn:
        assert (
            conn.execute(sa.text("SELECT count(*) FROM _emdash_media_usage_sources")).scalar() == 0
        )
        assert conn.execute(sa.text("SELECT count(*) FROM _emdash_media_usage")).scalar() == 0


def _two_claimed_items(db: sa.Engine):
    """Two items claimed with 1 s leases, a fresh keeper, and the repository it renews with."""
    posts = active_collection(db, "posts", FIELDS)
    sql(db, "INSERT INTO ec_posts (id, hero) VALUES ('e1', 'm1'), ('e2', 'm2')")
    repo = MediaUsageWorkRepository(db)
    claimed = [
        repo.claim_work(
            collection_id=posts.id, content_id=c, work_version=1, lease_duration_seconds=1
        )
        for c in ("e1", "e2")
    ]
    return posts, claimed, LeaseKeeper(), repo


def test_one_keeper_renews_every_lease_it_holds_and_lets_go_of_finished_ones(
    db: sa.Engine,
) -> None:
    _, (first, second), keeper, repo = _two_claimed_items(db)
    with keeper.keeping(repo.bind, first, lease_seconds=1, every_seconds=0.1, max_seconds=30) as a:
        with keeper.keeping(
            repo.bind, second, lease_seconds=1, every_seconds=0.1, max_seconds=30
        ) as b:
            wait_for(lambda: a.renewals >= 3 and b.renewals >= 3, timeout=10, interval=0.05)
        renewed = b.renewals
        wait_for(lambda: a.renewals >= renewed + 3, timeout=10, interval=0.05)
        # The finished hold is no longer renewed while the other one still is.
        assert b.renewals <= renewed + 1
    assert not a.lost.is_set() and not b.lost.is_set()


def test_a_hold_past_its_bound_stops_renewing_and_a_lost_lease_is_reported(
    db: sa.Engine,
) -> None:
    posts, (hung, taken), keeper, repo = _two_claimed_items(db)
    with (
        keeper.keeping(repo.bind, hung, lease_seconds=1, every_seconds=0.1, max_seconds=0.5) as h,
        keeper.keeping(repo.bind, taken, lease_seconds=1, every_seconds=0.1, max_seconds=30) as t,
    ):
        set_work(db, posts.id, "e2", lease_token="someone-else")
        wait_for(t.lost.is_set, timeout=10, interval=0.05)
        # A hung item gives its lease up: renewals stop at max_seconds and the lease runs out
        # (were it still renewed every 0.1 s, nobody could claim it for 30 s).
        wait_for(
            lambda: (
                repo.claim_work(
                    collection_id=posts.id,
                    content_id="e1",
                    work_version=1,
                    lease_duration_seconds=60,
                )
                is not None
            ),
            timeout=15,
            interval=0.05,
        )
        assert not h.lost.is_set()
