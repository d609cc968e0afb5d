"""enqueue_reconciliation_page: every guard emdash has, both dialects."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from media_usage_worker.repository.registry.collections import Collection
from tests.support import FUTURE, PAST, active_collection, get_work, insert_work

RUN, LEASE, EPOCH = "RUN01", "LEASE01", 9


@pytest.fixture
def reconciling_posts(db: sa.Engine) -> Collection:
    collection = active_collection(db)
    with db.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE _emdash_media_usage_index_status SET status = 'running', cursor = :r, "
                "change_epoch = :e, reconciliation_required = 1"
            ),
            {"r": RUN, "e": EPOCH},
        )
        conn.execute(
            sa.text(
                "INSERT INTO _emdash_media_usage_reconciliations (collection_id, "
                "collection_slug, run_token, target_epoch, state, phase, lease_token, "
                "lease_expires_at, next_attempt_at) VALUES (:id, 'posts', :r, :e, 'leased', "
                "'scan', :l, :f, :p)"
            ),
            {"id": collection.id, "r": RUN, "e": EPOCH, "l": LEASE, "f": FUTURE, "p": PAST},
        )
    return collection


def enqueue(repo, reconciling_posts, ids, **kw):
    args = {
        "collection_id": reconciling_posts.id,
        "collection_slug": "posts",
        "run_token": RUN,
        "lease_token": LEASE,
        "change_epoch": EPOCH,
        "phase": "scan",
        "content_ids": ids,
    }
    repo.enqueue_reconciliation_page(**(args | kw))


def test_enqueue_inserts_pending_rows_at_the_run_epoch(repo, reconciling_posts, db) -> None:
    enqueue(repo, reconciling_posts, ["b", "a", "b"])
    for content_id in ("a", "b"):
        row = get_work(db, reconciling_posts.id, content_id)
        assert (row["state"], row["work_version"], row["change_epoch"]) == ("pending", 1, EPOCH)
        assert row["next_attempt_at"] == row["created_at"] == row["updated_at"]
    assert {r.content_id for r in repo.find_due_work(10)} == {"a", "b"}


def test_enqueue_resets_only_older_epoch_rows(repo, reconciling_posts, db) -> None:
    insert_work(
        db,
        reconciling_posts,
        "old",
        change_epoch=EPOCH - 1,
        work_version=4,
        state="failed",
        attempt_count=5,
        last_error_code="E",
    )
    same = insert_work(
        db, reconciling_posts, "same", change_epoch=EPOCH, work_version=2, state="failed"
    )
    newer = insert_work(
        db,
        reconciling_posts,
        "newer",
        change_epoch=EPOCH + 1,
        state="leased",
        lease_token="T",
        lease_expires_at=FUTURE,
    )
    enqueue(repo, reconciling_posts, ["old", "same", "newer"])
    old = get_work(db, reconciling_posts.id, "old")
    assert (old["state"], old["work_version"], old["change_epoch"], old["attempt_count"]) == (
        "pending",
        5,
        EPOCH,
        0,
    )
    assert old["last_error_code"] is None
    assert get_work(db, reconciling_posts.id, "same") == same
    assert get_work(db, reconciling_posts.id, "newer") == newer


def test_a_pending_row_joins_the_run_without_a_new_version(repo, reconciling_posts, db) -> None:
    """A host's write during the run left its entry pending (its message already sent): the
    run takes it at its epoch but keeps its version, so that message still claims it. A row
    somebody holds, or one waiting to retry, gets a new version as before."""
    insert_work(db, reconciling_posts, "waiting", change_epoch=EPOCH - 1, work_version=3)
    insert_work(
        db, reconciling_posts, "held", change_epoch=EPOCH - 1, work_version=3, state="leased",
        lease_token="T", lease_expires_at=FUTURE,
    )  # fmt: skip
    insert_work(db, reconciling_posts, "retrying", change_epoch=EPOCH - 1, work_version=3,
                state="retry", attempt_count=2)  # fmt: skip
    enqueue(repo, reconciling_posts, ["waiting", "held", "retrying"])
    rows = {i: get_work(db, reconciling_posts.id, i) for i in ("waiting", "held", "retrying")}
    assert {i: (r["state"], r["work_version"], r["change_epoch"]) for i, r in rows.items()} == {
        "waiting": ("pending", 3, EPOCH),
        "held": ("pending", 4, EPOCH),
        "retrying": ("pending", 4, EPOCH),
    }
    assert rows["held"]["lease_token"] is None and rows["retrying"]["attempt_count"] == 0


BROKEN_GUARDS = {
    "run token": ("UPDATE _emdash_media_usage_reconciliations SET run_token = 'OTHER'", {}),
    "target epoch": ("UPDATE _emdash_media_usage_reconciliations SET target_epoch = 3", {}),
    "not leased": ("UPDATE _emdash_media_usage_reconciliations SET state = 'pending'", {}),
    "phase": ("UPDATE _emdash_media_usage_reconciliations SET phase = 'sources'", {}),
    "lease token": ("UPDATE _emdash_media_usage_reconciliations SET lease_token = 'X'", {}),
    "lease expired": (
        "UPDATE _emdash_media_usage_reconciliations SET lease_expires_at = :p",
        {"p": PAST},
    ),
    "capture": ("UPDATE _emdash_media_usage_index_status SET capture_state = 'deleting'", {}),
    "not required": ("UPDATE _emdash_media_usage_index_status SET reconciliation_required = 0", {}),
    "not running": ("UPDATE _emdash_media_usage_index_status SET status = 'stale'", {}),
    "status cursor": ("UPDATE _emdash_media_usage_index_status SET cursor = 'OTHER'", {}),
    # Behind the run's own epoch: not the run that bumped it (a write moves it ahead instead).
    "status epoch": ("UPDATE _emdash_media_usage_index_status SET change_epoch = 1", {}),
    "activation": ("UPDATE _emdash_media_usage_activation SET state = 'activating'", {}),
    "tombstone": (
        "INSERT INTO _emdash_media_usage_collection_deletions (collection_id, "
        "collection_slug, force_delete, next_attempt_at) "
        "SELECT id, 'gone', 0, 'x' FROM _emdash_collections",
        {},
    ),
    "renamed": ("UPDATE _emdash_collections SET slug = 'articles'", {}),
}


@pytest.mark.parametrize("guard", sorted(BROKEN_GUARDS))
def test_enqueue_writes_nothing_unless_the_run_owns_the_collection(
    repo, reconciling_posts, db, guard
) -> None:
    statement, params = BROKEN_GUARDS[guard]
    with db.begin() as conn:
        conn.execute(sa.text(statement), params)
    enqueue(repo, reconciling_posts, ["a", "b"])
    assert (
        get_work(db, reconciling_posts.id, "a") is None
        and get_work(db, reconciling_posts.id, "b") is None
    )


def test_a_write_during_the_run_does_not_stop_its_enqueue(repo, reconciling_posts, db) -> None:
    """A write moved the epoch past the run's: the run still owns the collection, and its page
    leaves the written entry's newer row alone."""
    insert_work(db, reconciling_posts, "written", change_epoch=EPOCH + 1, work_version=2)
    with db.begin() as conn:
        conn.execute(sa.text("UPDATE _emdash_media_usage_index_status SET change_epoch = :e"),
                     {"e": EPOCH + 1})  # fmt: skip
    enqueue(repo, reconciling_posts, ["a", "written"])
    assert get_work(db, reconciling_posts.id, "a")["change_epoch"] == EPOCH
    written = get_work(db, reconciling_posts.id, "written")
    assert (written["change_epoch"], written["work_version"]) == (EPOCH + 1, 2)


@pytest.mark.parametrize(
    "kw",
    [
        {"content_ids": []},
        {"content_ids": [f"e{i}" for i in range(51)]},
        {"content_ids": ["a", ""]},
        {"content_ids": "abc"},
        {"content_ids": [1]},
        {"change_epoch": -1},
        {"change_epoch": "x"},
        {"change_epoch": True},
        {"phase": "finalize"},
        {"run_token": ""},
        {"lease_token": ""},
        {"collection_slug": ""},
        {"collection_id": ""},
    ],
)
def test_enqueue_validation(repo, reconciling_posts, db, kw) -> None:
    with pytest.raises(ValueError):
        enqueue(repo, reconciling_posts, ["a"], **kw)
    assert get_work(db, reconciling_posts.id, "a") is None


def test_fifty_distinct_ids_with_duplicates_are_accepted(repo, reconciling_posts, db) -> None:
    ids = [f"e{i:02d}" for i in range(50)]
    enqueue(repo, reconciling_posts, ids + ids[:10], change_epoch=str(EPOCH))
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM _emdash_media_usage_work")).scalar() == 50
