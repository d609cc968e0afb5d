"""``oldest_due``: the earliest due time over every due state, ignoring what is not due."""

from __future__ import annotations

from media_usage_worker.repository.work_queue.work import MediaUsageWorkRepository
from tests.support import FUTURE, SAMPLE_FIELDS, active_collection, insert_work


def test_the_oldest_due_time_spans_every_due_state(db) -> None:
    posts = active_collection(db, "posts", SAMPLE_FIELDS)
    repo = MediaUsageWorkRepository(db)
    assert repo.oldest_due()[1] is None
    insert_work(db, posts, "p1", next_attempt_at="2001-01-01T00:00:00.000Z")
    insert_work(db, posts, "r1", state="retry", next_attempt_at="2000-06-01T00:00:00.000Z")
    insert_work(db, posts, "f1", state="failed", next_attempt_at="1990-01-01T00:00:00.000Z")
    insert_work(db, posts, "p2", next_attempt_at=FUTURE)
    insert_work(db, posts, "l1", state="leased", lease_token="t", next_attempt_at=FUTURE,
                lease_expires_at=FUTURE)  # fmt: skip
    now, oldest = repo.oldest_due()
    assert oldest == "2000-06-01T00:00:00.000Z" and now > oldest
    insert_work(db, posts, "l2", state="leased", lease_token="u", next_attempt_at=FUTURE,
                lease_expires_at="1999-01-01T00:00:00.000Z")  # fmt: skip
    assert repo.oldest_due()[1] == "1999-01-01T00:00:00.000Z"
