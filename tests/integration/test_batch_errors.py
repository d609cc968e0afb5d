"""A database error inside a batch ends as a retry of the entry that caused it, never as a
batch left leased for ever; values past an index's limit are no references at all."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

from media_usage_worker.api import MediaUsage
from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.policy import Limits
from media_usage_worker.domain.work import Item
from media_usage_worker.pipeline.batch import BatchRun
from media_usage_worker.repository.work_queue.work import MediaUsageWorkRepository
from tests.support import (
    PAST,
    SAMPLE_FIELDS,
    active_collection,
    drain,
    get_work,
    refuse_media_id,
    set_work,
)

POISON = "m-poison"


def _write(engine: sa.Engine, heroes: dict[str, str]) -> None:
    with engine.begin() as conn:
        for content_id, hero in heroes.items():
            conn.execute(
                sa.text("INSERT INTO ec_posts (id, hero) VALUES (:i, :h)"),
                {"i": content_id, "h": hero},
            )


def test_the_culprit_retries_and_its_batch_mates_complete(
    db: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    posts = active_collection(db, "posts", SAMPLE_FIELDS)
    refuse_media_id(db, POISON)
    heroes = {f"e{i:02d}": f"m-{i}" for i in range(20)} | {"bad": POISON}
    _write(db, heroes)
    due = MediaUsageWorkRepository(db).find_due_work(100)
    assert len(due) == 21
    caplog.set_level(logging.WARNING, logger="media_usage_worker.pipeline.batch")

    results = BatchRun(db, Limits()).run(
        [Item(r.collection_id, r.content_id, r.work_version) for r in due]
    )

    by_id = {r.content_id: str(r.outcome) for r in results}
    assert by_id.pop("bad") == "retry"
    assert set(by_id.values()) == {"completed"}
    row = get_work(db, posts.id, "bad")
    assert (row["state"], row["attempt_count"]) == ("retry", 1)
    assert row["last_error_code"] == "MEDIA_USAGE_PROCESSING_FAILED"
    assert MediaUsageWorkRepository(db).find_due_work(100) == []  # nothing left leased or due
    (retry,) = [r for r in caplog.records if getattr(r, "media_usage", None)]
    assert retry.media_usage["content_id"] == "bad"  # type: ignore[attr-defined]
    assert "refused by the test" in retry.media_usage["cause"]  # type: ignore[attr-defined]

    # At the attempt limit the culprit fails for good; it never loops.
    for _ in range(4):
        set_work(db, posts.id, "bad", next_attempt_at=PAST)
        drain(db)
    row = get_work(db, posts.id, "bad")
    assert (row["state"], row["attempt_count"]) == ("failed", 5)


@pytest.mark.parametrize("hero", ["m" * 3000, "é" * 300, {"provider": "p" * 100, "id": "x"}])
def test_a_value_past_an_index_limit_is_no_reference(db: sa.Engine, hero: object) -> None:
    import json

    active_collection(db, "posts", SAMPLE_FIELDS)
    gallery = json.dumps([{"image": "m-fine"}])
    value = hero if isinstance(hero, str) else json.dumps(hero)
    with db.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO ec_posts (id, hero, gallery) VALUES ('e1', :h, :g)"),
            {"h": value, "g": gallery},
        )
    results = drain(db)
    assert [str(r.outcome) for r in results] == ["completed"]
    with db.connect() as conn:
        ids = conn.execute(sa.text("SELECT media_id FROM _emdash_media_usage")).scalars().all()
    assert ids == ["m-fine"]


def test_an_expired_lease_counts_as_due_in_status(db: sa.Engine) -> None:
    posts = active_collection(db, "posts", [FieldDefinition("hero", "Hero", "image")])
    _write(db, {"e1": "m1"})
    set_work(
        db, posts.id, "e1", state="leased", lease_token="T",
        lease_expires_at="2000-01-01T00:00:00.000Z", next_attempt_at="2999-01-01T00:00:00.000Z",
    )  # fmt: skip
    (collection,) = MediaUsage(db).status().collections
    assert collection.work["leased"] == 1
    assert collection.oldest_due_age_seconds is not None
    assert collection.oldest_due_age_seconds > 3600 * 24 * 365
