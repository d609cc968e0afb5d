"""claim, complete, retry, fail, due selection and lookups: emdash's semantics, both dialects."""

from __future__ import annotations

import re
import threading
from datetime import datetime, timedelta

import pytest

from media_usage_worker.domain.work import WorkRecord
from media_usage_worker.repository.registry.collections import Collection
from media_usage_worker.repository.work_queue.work import MediaUsageWorkRepository
from tests.support import (
    FUTURE,
    PAST,
    SORTABLE,
    active_collection,
    bump_version,
    db_time,
    get_work,
    insert_work,
    set_work,
)

STAMP = "%Y-%m-%dT%H:%M:%S.%fZ"


def claim(repo: MediaUsageWorkRepository, posts: Collection, content_id: str = "e1", **kw):
    args = {"work_version": 1, "lease_duration_seconds": 60} | kw
    return repo.claim_work(collection_id=posts.id, content_id=content_id, **args)


def lease_of(record: WorkRecord) -> dict:
    return {
        "collection_id": record.collection_id,
        "content_id": record.content_id,
        "work_version": record.work_version,
        "lease_token": record.lease_token,
    }


# --- claim ------------------------------------------------------------------------------------


def test_claim_leases_a_due_row(repo, posts, db) -> None:
    insert_work(db, posts, "e1", attempt_count=2, state="retry")
    before = db_time(db)
    record = claim(repo, posts, lease_duration_seconds=90)
    assert record is not None
    assert record.state == "leased" and record.attempt_count == 2
    assert re.fullmatch(r"[0-9A-HJKMNP-TV-Z]{26}", record.lease_token)
    for stamp in (record.lease_expires_at, record.last_attempted_at, record.updated_at):
        assert re.fullmatch(SORTABLE, stamp)
    assert record.last_attempted_at >= before
    # Exactly 90 s later: one statement reads the clock once (docs/design.md §7).
    attempted = datetime.strptime(record.last_attempted_at, STAMP)
    assert datetime.strptime(record.lease_expires_at, STAMP) - attempted == timedelta(seconds=90)
    assert record.updated_at == record.last_attempted_at
    assert isinstance(record.work_version, int) and isinstance(record.change_epoch, int)


def test_claim_accepts_a_decimal_string_version(repo, posts, db) -> None:
    insert_work(db, posts, "e1", work_version=7)
    assert claim(repo, posts, work_version="7").work_version == 7


@pytest.mark.parametrize(
    ("row", "version"),
    [
        ({}, 2),  # future version
        ({"work_version": 3}, 2),  # old version
        ({"next_attempt_at": FUTURE}, 1),  # not yet due
        ({"state": "retry", "next_attempt_at": FUTURE}, 1),
        ({"state": "leased", "lease_token": "T", "lease_expires_at": FUTURE}, 1),  # live lease
        ({"state": "leased", "lease_token": "T", "lease_expires_at": None}, 1),
        ({"state": "failed"}, 1),
    ],
)
def test_claim_refuses(repo, posts, db, row, version) -> None:
    before = insert_work(db, posts, "e1", **row)
    assert claim(repo, posts, work_version=version) is None
    assert get_work(db, posts.id, "e1") == before


def test_claim_takes_over_an_expired_lease(repo, posts, db) -> None:
    insert_work(db, posts, "e1", state="leased", lease_token="OLD", lease_expires_at=PAST)
    record = claim(repo, posts)
    assert record is not None and record.lease_token != "OLD"
    assert repo.complete_work(**{**lease_of(record), "lease_token": "OLD"}) is False


def test_claim_of_a_missing_row_is_none(repo, posts) -> None:
    assert claim(repo, posts, content_id="nope") is None


@pytest.mark.parametrize(
    "kw",
    [
        {"work_version": True},
        {"work_version": 1.0},
        {"work_version": 0},
        {"work_version": "0"},
        {"work_version": "01"},
        {"work_version": "-1"},
        {"work_version": " 1"},
        {"work_version": "1e3"},
        {"work_version": 2**63},
        {"work_version": "9" * 30},
        {"work_version": None},
        {"lease_duration_seconds": 0},
        {"lease_duration_seconds": 31_536_001},
        {"lease_duration_seconds": 1.5},
        {"lease_duration_seconds": True},
        {"lease_duration_seconds": "60"},
        {"content_id": ""},
        {"content_id": 5},
        {"content_id": "x" * 5000},
    ],
)
def test_claim_validates_before_any_write(repo, posts, db, kw) -> None:
    before = insert_work(db, posts, "e1")
    with pytest.raises(ValueError):
        claim(repo, posts, **kw)
    assert get_work(db, posts.id, "e1") == before


def test_two_claimers_at_the_same_moment_one_wins(repo, posts, db) -> None:
    """Two threads, two pooled connections, released by one barrier; 50 rounds."""
    for round_ in range(50):
        content_id = f"race-{round_}"
        insert_work(db, posts, content_id)
        barrier = threading.Barrier(2)
        results: list[WorkRecord | None] = []

        def contend(content_id: str, barrier: threading.Barrier, results: list) -> None:
            barrier.wait(timeout=10)
            results.append(claim(repo, posts, content_id=content_id))

        threads = [
            threading.Thread(target=contend, args=(content_id, barrier, results)) for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        winners = [r for r in results if r is not None]
        assert len(results) == 2 and len(winners) == 1, round_
        assert get_work(db, posts.id, content_id)["lease_token"] == winners[0].lease_token


# --- complete / retry / fail --------------------------------------------------------------------


def test_complete_deletes_the_row(repo, posts, db) -> None:
    insert_work(db, posts, "e1")
    record = claim(repo, posts)
    assert repo.complete_work(**lease_of(record)) is True
    assert get_work(db, posts.id, "e1") is None
    assert repo.complete_work(**lease_of(record)) is False


def test_retry_schedules_the_next_attempt(repo, posts, db) -> None:
    insert_work(db, posts, "e1")
    record = claim(repo, posts)
    before = db_time(db)
    assert repo.retry_work(**lease_of(record), retry_delay_seconds=120, error_code="E_ONE") is True
    row = get_work(db, posts.id, "e1")
    assert (row["state"], row["attempt_count"], row["last_error_code"]) == ("retry", 1, "E_ONE")
    assert row["lease_token"] is None and row["lease_expires_at"] is None
    assert row["next_attempt_at"] > before and re.fullmatch(SORTABLE, row["next_attempt_at"])
    assert claim(repo, posts) is None  # not due for two minutes


def test_retry_with_zero_delay_is_due_at_once(repo, posts, db) -> None:
    insert_work(db, posts, "e1")
    record = claim(repo, posts)
    repo.retry_work(**lease_of(record), retry_delay_seconds=0, error_code="E")
    assert [r.content_id for r in repo.find_due_work(10)] == ["e1"]
    assert claim(repo, posts).attempt_count == 1


def test_fail_keeps_next_attempt_at(repo, posts, db) -> None:
    insert_work(db, posts, "e1", attempt_count=4)
    record = claim(repo, posts)
    assert repo.fail_work(**lease_of(record), error_code="MEDIA_USAGE_PROCESSING_FAILED") is True
    row = get_work(db, posts.id, "e1")
    assert (row["state"], row["attempt_count"]) == ("failed", 5)
    assert row["next_attempt_at"] == record.next_attempt_at
    assert row["lease_token"] is None


@pytest.mark.parametrize("fence", ["expired", "bumped", "wrong_token", "taken_over"])
def test_a_fenced_holder_can_never_complete_retry_or_fail(repo, posts, db, fence) -> None:
    insert_work(db, posts, "e1")
    record = claim(repo, posts)
    lease = lease_of(record)
    if fence == "expired":
        set_work(db, posts.id, "e1", lease_expires_at=PAST)
    elif fence == "bumped":
        bump_version(db, posts.id, "e1")
    elif fence == "wrong_token":
        lease["lease_token"] = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
    else:
        set_work(db, posts.id, "e1", lease_expires_at=PAST)
        assert claim(repo, posts) is not None
    before = get_work(db, posts.id, "e1")
    assert repo.complete_work(**lease) is False
    assert repo.retry_work(**lease, retry_delay_seconds=0, error_code="E") is False
    assert repo.fail_work(**lease, error_code="E") is False
    assert get_work(db, posts.id, "e1") == before


@pytest.mark.parametrize(
    "code", ["boom: stack trace", "lower_case", "", "E" * 65, "1ABC", "_X", None, 42]
)
def test_raw_error_text_is_rejected_without_releasing_the_lease(repo, posts, db, code) -> None:
    insert_work(db, posts, "e1")
    record = claim(repo, posts)
    before = get_work(db, posts.id, "e1")
    with pytest.raises(ValueError, match="SCREAMING_SNAKE_CASE"):
        repo.retry_work(**lease_of(record), retry_delay_seconds=0, error_code=code)
    with pytest.raises(ValueError, match="SCREAMING_SNAKE_CASE"):
        repo.fail_work(**lease_of(record), error_code=code)
    assert get_work(db, posts.id, "e1") == before
    assert repo.complete_work(**lease_of(record)) is True


@pytest.mark.parametrize("delay", [-1, 31_536_001, 0.5, True, "0"])
def test_retry_delay_validation(repo, posts, db, delay) -> None:
    insert_work(db, posts, "e1")
    record = claim(repo, posts)
    with pytest.raises(ValueError, match="retry delay"):
        repo.retry_work(**lease_of(record), retry_delay_seconds=delay, error_code="E")
    assert get_work(db, posts.id, "e1")["state"] == "leased"


@pytest.mark.parametrize("token", ["", None, 7])
def test_empty_lease_token_is_rejected(repo, posts, db, token) -> None:
    insert_work(db, posts, "e1")
    record = claim(repo, posts)
    with pytest.raises(ValueError):
        repo.complete_work(**{**lease_of(record), "lease_token": token})
    assert get_work(db, posts.id, "e1")["state"] == "leased"


# --- due selection -------------------------------------------------------------------------------


def test_find_due_work_merges_states_in_eligibility_order(repo, posts, db) -> None:
    insert_work(db, posts, "p2", next_attempt_at="2001-01-01T00:00:02.000Z")
    insert_work(db, posts, "p1", next_attempt_at="2001-01-01T00:00:01.000Z")
    insert_work(db, posts, "r1", state="retry", next_attempt_at="2001-01-01T00:00:01.500Z")
    leased = {"state": "leased", "lease_token": "T", "next_attempt_at": FUTURE}
    insert_work(db, posts, "l1", **leased, lease_expires_at="2001-01-01T00:00:00.500Z")
    tie = {"next_attempt_at": "2001-01-01T00:00:03.000Z", "updated_at": "2001-01-01T00:00:00.000Z"}
    insert_work(db, posts, "tie-b", **tie)
    insert_work(db, posts, "tie-a", **tie)
    insert_work(db, posts, "live", state="leased", lease_token="T", lease_expires_at=FUTURE)
    insert_work(db, posts, "later", next_attempt_at=FUTURE)
    insert_work(db, posts, "failed", state="failed", next_attempt_at=PAST)
    insert_work(db, posts, "dead", state="leased", lease_token=None, lease_expires_at=None)

    due = repo.find_due_work(100)
    assert [r.content_id for r in due] == ["l1", "p1", "r1", "p2", "tie-a", "tie-b"]
    assert [r.content_id for r in repo.find_due_work(2)] == ["l1", "p1"]


@pytest.mark.parametrize("limit", [0, 101, -1, 1.0, True, "5", None])
def test_find_due_work_limit_validation(repo, limit) -> None:
    with pytest.raises(ValueError, match="1 to 100"):
        repo.find_due_work(limit)


def test_find_work_for_content_requires_the_current_identity(repo, posts, db) -> None:
    insert_work(db, posts, "e1")
    insert_work(db, posts, "moved", collection_slug="old_posts")
    found = repo.find_work_for_content("posts", "e1")
    assert found is not None and found.collection_id == posts.id
    assert repo.find_work_for_content("posts", "moved") is None
    assert repo.find_work_for_content("old_posts", "moved") is None
    assert repo.find_work_for_content("posts", "missing") is None
    with pytest.raises(ValueError):
        repo.find_work_for_content("", "e1")


def test_delete_work_through_epoch(repo, posts, db) -> None:
    for epoch in (1, 2, 3, 4):
        insert_work(db, posts, f"e{epoch}", change_epoch=epoch)
    other = active_collection(db, "pages")
    insert_work(db, other, "x", change_epoch=1)
    assert repo.delete_work_through_epoch(posts.id, "2") == 2
    assert repo.delete_work_through_epoch(posts.id, 2) == 0
    assert [get_work(db, posts.id, f"e{e}") is None for e in (1, 2, 3, 4)] == [
        True,
        True,
        False,
        False,
    ]
    assert get_work(db, other.id, "x") is not None
    for bad in (-1, "-1", "x", 1.5, None):
        with pytest.raises(ValueError):
            repo.delete_work_through_epoch(posts.id, bad)
    with pytest.raises(ValueError):
        repo.delete_work_through_epoch("", 1)
