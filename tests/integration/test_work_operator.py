"""Operator listing and operator retry, with emdash's race handling, on both dialects."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from media_usage_worker.domain.cursor import encode_cursor, work_scope
from media_usage_worker.repository.work_queue import work_operator
from tests.support import (
    FUTURE,
    PAST,
    active_collection,
    drain,
    get_work,
    insert_work,
    mark_coverage_complete,
    status_row,
)


def stamp(second: int) -> str:
    return f"2020-01-01T00:00:{second:02d}.000Z"


# --- listing -------------------------------------------------------------------------------------


def test_listing_merges_states_newest_first_and_pages_by_keyset(repo, posts, db) -> None:
    states = ["pending", "retry", "leased", "failed"]
    for i in range(23):
        extra = (
            {"lease_token": "T", "lease_expires_at": FUTURE} if states[i % 4] == "leased" else {}
        )
        insert_work(db, posts, f"e{i:02d}", state=states[i % 4], updated_at=stamp(i // 2), **extra)
    expected = sorted(
        ((stamp(i // 2), f"e{i:02d}") for i in range(23)), reverse=True
    )  # updated_at desc, content_id desc

    seen, cursor, pages = [], None, 0
    while True:
        page = repo.find_operator_page(collection_slug="posts", limit=5, cursor=cursor)
        seen += [(item.updated_at, item.content_id) for item in page.items]
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == expected
    assert pages == 5


def test_listing_filters_by_state_and_redacts(repo, posts, db) -> None:
    insert_work(db, posts, "a", state="failed", last_error_code="E_X")
    insert_work(db, posts, "b")
    page = repo.find_operator_page(collection_slug="posts", state="failed")
    assert [item.content_id for item in page.items] == ["a"]
    item = page.items[0]
    assert item.last_error_code == "E_X" and page.next_cursor is None
    for hidden in ("lease_token", "work_version", "change_epoch"):
        assert not hasattr(item, hidden)


def test_listing_shows_only_rows_of_the_current_identity(repo, posts, db) -> None:
    insert_work(db, posts, "current")
    insert_work(db, posts, "renamed", collection_slug="old_slug")
    page = repo.find_operator_page(collection_slug="posts")
    assert [item.content_id for item in page.items] == ["current"]


def test_listing_an_unknown_collection_is_none(repo, posts) -> None:
    assert repo.find_operator_page(collection_slug="nope") is None


def test_exact_page_has_no_cursor(repo, posts, db) -> None:
    for i in range(3):
        insert_work(db, posts, f"e{i}")
    page = repo.find_operator_page(collection_slug="posts", limit=3)
    assert len(page.items) == 3 and page.next_cursor is None
    assert repo.find_operator_page(collection_slug="posts", cursor="").items == page.items


@pytest.mark.parametrize(
    "kw",
    [
        {"collection_slug": ""},
        {"state": "done"},
        {"limit": 0},
        {"limit": 101},
        {"limit": 1.5},
        {"limit": True},
        {"cursor": "x" * 4097},
        {"cursor": "garbage"},
        {"cursor": 5},
    ],
)
def test_listing_validation(repo, posts, kw) -> None:
    with pytest.raises(ValueError):
        repo.find_operator_page(**{"collection_slug": "posts", **kw})


def test_tampered_or_truncated_cursor_is_a_value_error(repo, posts, db) -> None:
    for i in range(4):
        insert_work(db, posts, f"e{i}", updated_at=stamp(i))
    cursor = repo.find_operator_page(collection_slug="posts", limit=2).next_cursor
    assert cursor
    flipped = cursor[:3] + ("A" if cursor[3] != "A" else "B") + cursor[4:]
    forged_shape = encode_cursor("not-a-time", "e1", scope=work_scope("posts", None))
    for bad in (
        cursor[:-1],
        cursor[:10],
        flipped,
        cursor + "x",
        cursor.replace(".", ""),
        forged_shape,
        "e30=.0000000000000000",
    ):
        with pytest.raises(ValueError):
            repo.find_operator_page(collection_slug="posts", limit=2, cursor=bad)


def test_a_cursor_of_another_listing_is_refused(repo, posts, db) -> None:
    for i in range(4):
        insert_work(db, posts, f"e{i}", updated_at=stamp(i))
    cursor = repo.find_operator_page(collection_slug="posts", limit=2).next_cursor
    assert repo.find_operator_page(collection_slug="posts", limit=2, cursor=cursor).items
    active_collection(db, "pages")
    for other in ({"collection_slug": "pages"}, {"collection_slug": "posts", "state": "pending"}):
        with pytest.raises(ValueError, match="cursor"):
            repo.find_operator_page(**other, limit=2, cursor=cursor)


# --- operator retry -------------------------------------------------------------------------------


def retry(repo, posts, content_id="e1"):
    return repo.retry_operator_work(collection_id=posts.id, content_id=content_id)


def test_retry_of_pending_work_changes_nothing(repo, posts, db) -> None:
    before = insert_work(db, posts, "e1")
    epoch = status_row(db, posts.id)["change_epoch"]
    result = retry(repo, posts)
    assert (result.outcome, result.changed) == ("pending", False)
    assert result.work.content_id == "e1" and result.lease_expires_at is None
    assert get_work(db, posts.id, "e1") == before
    assert status_row(db, posts.id)["change_epoch"] == epoch


@pytest.mark.parametrize(
    "row",
    [
        {"state": "failed", "attempt_count": 5, "last_error_code": "E_X"},
        {"state": "retry", "attempt_count": 2, "next_attempt_at": FUTURE},
        {"state": "leased", "lease_token": "T", "lease_expires_at": PAST},  # abandoned lease
    ],
)
def test_retry_reopens_work_and_invalidates_coverage(repo, posts, db, row) -> None:
    with db.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE _emdash_media_usage_index_status SET status = 'complete', "
                "completed_at = 'c', change_epoch = 7"
            )
        )
    insert_work(db, posts, "e1", work_version=3, change_epoch=5, **row)
    result = retry(repo, posts)
    assert (result.outcome, result.changed) == ("pending", True)
    after = get_work(db, posts.id, "e1")
    assert (after["state"], after["work_version"], after["change_epoch"]) == ("pending", 4, 8)
    assert (after["attempt_count"], after["last_error_code"], after["lease_token"]) == (
        0,
        None,
        None,
    )
    status = status_row(db, posts.id)
    assert (status["status"], status["completed_at"], status["change_epoch"]) == ("stale", None, 8)
    assert repo.find_due_work(10)[0].content_id == "e1"


def test_retry_creates_missing_work(repo, posts, db) -> None:
    with db.begin() as conn:
        conn.execute(sa.text("INSERT INTO ec_posts (id) VALUES ('fresh')"))
        conn.execute(sa.text("DELETE FROM _emdash_media_usage_work"))  # indexed since
    epoch = status_row(db, posts.id)["change_epoch"]
    result = retry(repo, posts, "fresh")
    assert (result.outcome, result.changed) == ("pending", True)
    row = get_work(db, posts.id, "fresh")
    assert (row["work_version"], row["change_epoch"], row["collection_slug"]) == (
        1, epoch + 1, "posts"
    )  # fmt: skip


def test_retry_creates_missing_work_without_requiring_the_content_row(repo, posts, db) -> None:
    """emdash's contract: the retry is how an operator makes the worker reconcile an entry whose
    content is already gone, so no content row is asked for."""
    mark_coverage_complete(db)
    epoch = status_row(db, posts.id)["change_epoch"]
    result = retry(repo, posts, "never-written")
    assert (result.outcome, result.changed) == ("pending", True)
    assert result.work.content_id == "never-written"
    row = get_work(db, posts.id, "never-written")
    assert (row["state"], row["work_version"], row["change_epoch"]) == ("pending", 1, epoch + 1)
    status = status_row(db, posts.id)
    assert (status["status"], status["completed_at"]) == ("stale", None)


def _drop_content_table(db) -> None:
    with db.begin() as conn:
        conn.execute(sa.text("DROP TABLE ec_posts"))


def test_ported_methods_on_a_collection_whose_content_table_is_gone(repo, posts, db) -> None:
    """A registered, active collection whose ``ec_*`` table is missing (a deletion in progress,
    a host that dropped it): every ported method answers as documented, none reads the table."""
    insert_work(db, posts, "kept", state="failed", attempt_count=5, last_error_code="E_X")
    _drop_content_table(db)

    created = retry(repo, posts, "e1")
    assert (created.outcome, created.changed) == ("pending", True)
    reopened = retry(repo, posts, "kept")
    assert (reopened.outcome, reopened.changed) == ("pending", True)
    assert retry(repo, posts, "e1").outcome == "pending"  # already pending: unchanged
    page = repo.find_operator_page(collection_slug="posts")
    assert sorted(item.content_id for item in page.items) == ["e1", "kept"]
    due = repo.find_due_work(10)
    assert sorted(record.content_id for record in due) == ["e1", "kept"]
    assert repo.find_work_for_content("posts", "e1").content_id == "e1"

    first, second = (next(r for r in due if r.content_id == c) for c in ("e1", "kept"))
    lease = {"collection_id": posts.id, "lease_duration_seconds": 60}
    claimed = repo.claim_work(content_id="e1", work_version=first.work_version, **lease)
    held = {
        "collection_id": posts.id,
        "content_id": "e1",
        "work_version": first.work_version,
        "lease_token": claimed.lease_token,
    }
    assert repo.extend_lease(**held, lease_duration_seconds=60) is not None
    assert retry(repo, posts, "e1").outcome == "lease_active"
    assert repo.retry_work(**held, retry_delay_seconds=0, error_code="E_Y") is True
    again = repo.claim_work(content_id="e1", work_version=first.work_version, **lease)
    assert repo.complete_work(**{**held, "lease_token": again.lease_token}) is True
    assert get_work(db, posts.id, "e1") is None

    other = repo.claim_work(content_id="kept", work_version=second.work_version, **lease)
    assert (
        repo.fail_work(
            collection_id=posts.id,
            content_id="kept",
            work_version=second.work_version,
            lease_token=other.lease_token,
            error_code="E_Z",
        )
        is True
    )
    assert get_work(db, posts.id, "kept")["state"] == "failed"


def test_retry_after_the_collection_is_removed_creates_nothing(repo, posts, db) -> None:
    _drop_content_table(db)
    with db.begin() as conn:
        conn.execute(sa.text("DELETE FROM _emdash_collections WHERE id = :id"), {"id": posts.id})
    result = retry(repo, posts, "e1")
    assert (result.outcome, result.changed, result.work) == ("collection_not_found", False, None)
    assert get_work(db, posts.id, "e1") is None


@pytest.mark.parametrize("table_left", [True, False])
def test_retry_refusal_tells_a_mistyped_id_from_an_entry_to_reconcile(
    repo, posts, db, table_left
) -> None:
    from media_usage_worker.domain.vocabulary import RetryOutcome

    with db.begin() as conn:
        conn.execute(sa.text("INSERT INTO ec_posts (id) VALUES ('written')"))
        conn.execute(sa.text("DELETE FROM _emdash_media_usage_work"))  # its work was lost
    insert_work(db, posts, "queued")
    if not table_left:
        _drop_content_table(db)

    def refusal(content_id: str):
        return work_operator.retry_refusal(db, collection_id=posts.id, content_id=content_id)

    assert refusal("typo") == RetryOutcome.CONTENT_NOT_FOUND
    assert refusal("queued") is None
    # The written entry has no work and nothing indexed: only its content row vouches for it.
    assert refusal("written") is (None if table_left else RetryOutcome.CONTENT_NOT_FOUND)
    assert work_operator.retry_refusal(db, collection_id="01JUNKNOWN", content_id="queued") == (
        RetryOutcome.COLLECTION_NOT_FOUND
    )
    assert get_work(db, posts.id, "typo") is None


def test_retry_respects_a_live_lease(repo, posts, db) -> None:
    before = insert_work(db, posts, "e1", state="leased", lease_token="T", lease_expires_at=FUTURE)
    result = retry(repo, posts)
    assert result.outcome == "lease_active" and result.lease_expires_at == FUTURE
    assert (result.changed, result.work) == (False, None)
    assert get_work(db, posts.id, "e1") == before


def test_retry_for_a_collection_without_active_capture(repo, db) -> None:
    from media_usage_worker.repository.registry.collections import CollectionRegistry

    pending = CollectionRegistry(db).create_collection("drafts", "Drafts")
    result = repo.retry_operator_work(collection_id=pending.id, content_id="e1")
    assert result.outcome == "collection_not_found"
    assert repo.retry_operator_work(collection_id="unknown", content_id="e1").outcome == (
        "collection_not_found"
    )


def test_retry_that_loses_a_race_reports_conflict(repo, posts, db, monkeypatch) -> None:
    """The row changed between observation and the guarded writes: nothing is written."""
    insert_work(db, posts, "e1", state="failed", work_version=2)
    stale = get_work(db, posts.id, "e1")
    epoch = status_row(db, posts.id)["change_epoch"]
    with db.begin() as conn:  # a capture + failure happened meanwhile: version 3, failed again
        conn.execute(sa.text("UPDATE _emdash_media_usage_work SET work_version = 3"))
    real = work_operator._find_by_identity
    calls = iter([lambda *a: _row_like(stale)])
    monkeypatch.setattr(work_operator, "_find_by_identity", lambda *a: next(calls, real)(*a))
    result = retry(repo, posts)
    assert result.outcome == "conflict"
    assert get_work(db, posts.id, "e1")["work_version"] == 3
    assert status_row(db, posts.id)["change_epoch"] == epoch


def test_retry_that_loses_to_a_new_claim_reports_the_lease(repo, posts, db, monkeypatch) -> None:
    insert_work(db, posts, "e1", state="failed")
    stale = get_work(db, posts.id, "e1")
    with db.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE _emdash_media_usage_work SET state = 'leased', lease_token = 'T', "
                "lease_expires_at = :f"
            ),
            {"f": FUTURE},
        )
    real = work_operator._find_by_identity
    calls = iter([lambda *a: _row_like(stale)])
    monkeypatch.setattr(work_operator, "_find_by_identity", lambda *a: next(calls, real)(*a))
    result = retry(repo, posts)
    assert (result.outcome, result.lease_expires_at) == ("lease_active", FUTURE)


def _row_like(values: dict):
    """A stand-in for the row as it was observed before the race."""
    from types import SimpleNamespace

    return SimpleNamespace(**values)


@pytest.mark.parametrize("kw", [{"collection_id": ""}, {"content_id": ""}, {"content_id": None}])
def test_retry_validation(repo, posts, kw) -> None:
    with pytest.raises(ValueError):
        repo.retry_operator_work(**{"collection_id": posts.id, "content_id": "e1", **kw})


def test_retry_of_a_deleted_entry_still_in_the_index_is_accepted(repo, posts, db) -> None:
    with db.begin() as conn:
        conn.execute(sa.text("INSERT INTO ec_posts (id) VALUES ('gone')"))
    drain(db)
    with db.begin() as conn:
        conn.execute(sa.text("DELETE FROM ec_posts WHERE id = 'gone'"))
        conn.execute(sa.text("DELETE FROM _emdash_media_usage_work"))  # its work was lost
    assert retry(repo, posts, "gone").outcome == "pending"  # the retry removes its sources
    drain(db)
    with db.connect() as conn:
        left = conn.execute(
            sa.text("SELECT count(*) FROM _emdash_media_usage_sources WHERE content_id = 'gone'")
        ).scalar_one()
    assert left == 0
