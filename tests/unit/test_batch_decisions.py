"""How a batch's items end, decided without a database: a small in-memory work row stands in
for the repository's two fenced transitions."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import pytest

from media_usage_worker.domain.vocabulary import ErrorCode, Outcome, WorkState
from media_usage_worker.domain.work import Item, Lease, WorkRecord
from media_usage_worker.pipeline.settle import (
    EntryOutcome,
    entry_outcome,
    lost,
    settle,
)

# What the transitions run over; the fake only checks it is passed through.
BIND: object = object()
RECORD = WorkRecord(
    collection_id="01COLLECTION",
    collection_slug="posts",
    content_id="e1",
    change_epoch=1,
    work_version=3,
    state=WorkState.LEASED,
    attempt_count=0,
    next_attempt_at="2026-12-05T00:00:00.000Z",
    lease_token="token-1",
    lease_expires_at="2026-12-05T00:01:00.000Z",
    last_attempted_at=None,
    last_error_code=None,
    created_at="2026-12-05T00:00:00.000Z",
    updated_at="2026-12-05T00:00:00.000Z",
)


@dataclass
class FakeWork:
    """One row's state and lease; a transition holds only under the live lease and version."""

    token: str | None = "token-1"
    version: int = 3
    calls: list[tuple[str, dict[str, object]]] = field(default_factory=list)

    def _holds(self, work_version: int, lease_token: str) -> bool:
        return lease_token == self.token and work_version == self.version

    def fail_lease(self, bind: object, lease: Lease, /, **kwargs: object) -> bool:
        assert bind is BIND
        self.calls.append(("fail", {**asdict(lease), **kwargs}))
        return self._holds(lease.work_version, lease.lease_token)

    def retry_lease(self, bind: object, lease: Lease, /, **kwargs: object) -> bool:
        assert bind is BIND
        self.calls.append(("retry", {**asdict(lease), **kwargs}))
        return self._holds(lease.work_version, lease.lease_token)


def _settle(work: FakeWork, record: WorkRecord, code: ErrorCode) -> tuple[object, list[object]]:
    noted: list[object] = []
    settled = settle(
        work, BIND, record, code, lambda: 0.0, lambda r, c: noted.append((r.content_id, c))
    )
    return settled, noted


def test_a_first_failure_is_retried_with_backoff_under_the_lease() -> None:
    work = FakeWork()
    settled, noted = _settle(work, RECORD, ErrorCode.SNAPSHOT_FAILED)
    assert settled.result.outcome == Outcome.RETRY and settled.retry_in == 30
    assert settled.changed and noted == []
    (name, sent), *_ = work.calls
    assert name == "retry" and sent["lease_token"] == "token-1" and sent["work_version"] == 3
    later = replace(RECORD, attempt_count=2)
    assert _settle(FakeWork(), later, ErrorCode.SNAPSHOT_FAILED)[0].retry_in == 120


@pytest.mark.parametrize(
    ("attempts", "code"),
    [(4, ErrorCode.SNAPSHOT_FAILED), (0, ErrorCode.RESOURCE_LIMIT)],
)
def test_the_last_attempt_or_a_resource_limit_fails_for_good_and_is_noted(
    attempts: int, code: ErrorCode
) -> None:
    work = FakeWork()
    settled, noted = _settle(work, replace(RECORD, attempt_count=attempts), code)
    assert settled.result.outcome == Outcome.FAILED and settled.retry_in is None
    assert settled.result.error_code == code and settled.changed
    assert noted == [("e1", code)] and [name for name, _ in work.calls] == ["fail"]


@pytest.mark.parametrize("attempts", [0, 4])
def test_a_lease_lost_meanwhile_changes_nothing_and_notes_nothing(attempts: int) -> None:
    newer = FakeWork(version=4)  # a newer write fenced the row
    settled, noted = _settle(newer, replace(RECORD, attempt_count=attempts), ErrorCode.TIME_LIMIT)
    assert settled.result.outcome == Outcome.SUPERSEDED and not settled.changed
    assert noted == []
    taken = FakeWork(token="token-2")  # another worker holds it now
    assert _settle(taken, RECORD, ErrorCode.TIME_LIMIT)[0].result.outcome == Outcome.SUPERSEDED


def test_entry_outcomes_after_the_shared_write() -> None:
    failed = {"bad": object()}
    written, completed = {"done", "fenced"}, {"done"}
    outcomes = {
        content_id: entry_outcome(content_id, failed, written, completed)
        for content_id in ("bad", "done", "fenced", "raced")
    }
    assert outcomes == {
        "bad": EntryOutcome.REFRESH_FAILED,
        "done": EntryOutcome.COMPLETED,
        "fenced": EntryOutcome.SUPERSEDED,
        "raced": EntryOutcome.ALONE,
    }
    # A refresh that failed counts as failed even if a write for it was somehow reported.
    assert entry_outcome("bad", failed, {"bad"}, {"bad"}) == EntryOutcome.REFRESH_FAILED


def test_an_item_not_claimed_is_claim_lost() -> None:
    result = lost(Item("01COLLECTION", "e9", 7))
    assert result.outcome == Outcome.CLAIM_LOST
    assert result.as_dict() == {
        "outcome": Outcome.CLAIM_LOST,
        "collection_id": "01COLLECTION",
        "content_id": "e9",
        "work_version": 7,
    }
