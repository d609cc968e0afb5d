"""Random sequences of work operations against the repository and a small model of emdash's rules.

Content writes go through the real capture triggers (plain SQL on ``ec_posts``), so the model
also pins down the trigger's upsert. Time moves only by rewriting timestamps to the past,
never by sleeping.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from media_usage_worker.repository.work_queue.work import MediaUsageWorkRepository
from tests.support import PAST, active_collection, examples, get_work, set_work

ENTRIES = ("e0", "e1")
entries = st.sampled_from(ENTRIES)
token_choices = st.sampled_from(["current", "stale", "forged"])


@dataclass
class Expected:
    version: int
    state: str = "pending"
    attempts: int = 0
    due: bool = True
    live: bool = False
    token: str | None = None
    stale_tokens: list[str] = field(default_factory=list)

    @property
    def claimable(self) -> bool:
        if self.state in ("pending", "retry"):
            return self.due
        return self.state == "leased" and not self.live


def make_machine(engine: sa.Engine, collection_id: str) -> type[RuleBasedStateMachine]:
    repo = MediaUsageWorkRepository(engine)

    class WorkMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            with engine.begin() as conn:
                conn.execute(sa.text("DELETE FROM ec_posts"))
                conn.execute(sa.text("DELETE FROM _emdash_media_usage_work"))
            self.model: dict[str, Expected] = {}
            self.content: set[str] = set()
            self.retired: dict[str, list[str]] = {e: [] for e in ENTRIES}

        # --- actions ----------------------------------------------------------------------

        @rule(entry=entries)
        def write_content(self, entry: str) -> None:
            with engine.begin() as conn:
                if entry in self.content:
                    conn.execute(
                        sa.text("UPDATE ec_posts SET version = version + 1 WHERE id = :id"),
                        {"id": entry},
                    )
                else:
                    conn.execute(sa.text("INSERT INTO ec_posts (id) VALUES (:id)"), {"id": entry})
                    self.content.add(entry)
            old = self.model.get(entry)
            if old is not None and old.token:
                self.retired[entry].append(old.token)
            self.model[entry] = Expected(version=old.version + 1 if old else 1)

        @rule(entry=entries, offset=st.sampled_from([-1, 0, 0, 0, 1]))
        def claim(self, entry: str, offset: int) -> None:
            expected = self.model.get(entry)
            version = (expected.version if expected else 1) + offset
            if version < 1:
                return
            record = repo.claim_work(
                collection_id=collection_id,
                content_id=entry,
                work_version=version,
                lease_duration_seconds=300,
            )
            wins = expected is not None and offset == 0 and expected.claimable
            assert (record is not None) == wins
            if wins:
                if expected.token:
                    self.retired[entry].append(expected.token)
                expected.state, expected.live, expected.token = "leased", True, record.lease_token
                assert record.attempt_count == expected.attempts

        def _token(self, entry: str, choice: str) -> str:
            expected = self.model.get(entry)
            if choice == "current" and expected is not None and expected.token:
                return expected.token
            if choice == "stale" and self.retired[entry]:
                return self.retired[entry][-1]
            return "01ARZ3NDEKTSV4RRFFQ69G5FAV"

        def _holder_wins(self, entry: str, token: str) -> bool:
            expected = self.model.get(entry)
            return (
                expected is not None
                and expected.state == "leased"
                and expected.live
                and token == expected.token
            )

        def _lease(self, entry: str, token: str) -> dict:
            expected = self.model.get(entry)
            return {
                "collection_id": collection_id,
                "content_id": entry,
                "work_version": expected.version if expected else 1,
                "lease_token": token,
            }

        @rule(entry=entries, choice=token_choices)
        def complete(self, entry: str, choice: str) -> None:
            token = self._token(entry, choice)
            wins = self._holder_wins(entry, token)
            assert repo.complete_work(**self._lease(entry, token)) == wins
            if wins:
                del self.model[entry]

        @rule(entry=entries, choice=token_choices, delay=st.sampled_from([0, 3600]))
        def retry(self, entry: str, choice: str, delay: int) -> None:
            token = self._token(entry, choice)
            wins = self._holder_wins(entry, token)
            done = repo.retry_work(
                **self._lease(entry, token), retry_delay_seconds=delay, error_code="E_RETRY"
            )
            assert done == wins
            if wins:
                expected = self.model[entry]
                self.retired[entry].append(token)
                expected.state, expected.attempts = "retry", expected.attempts + 1
                expected.due, expected.live, expected.token = delay == 0, False, None

        @rule(entry=entries, choice=token_choices)
        def fail(self, entry: str, choice: str) -> None:
            token = self._token(entry, choice)
            wins = self._holder_wins(entry, token)
            assert repo.fail_work(**self._lease(entry, token), error_code="E_FAIL") == wins
            if wins:
                expected = self.model[entry]
                self.retired[entry].append(token)
                expected.state, expected.attempts = "failed", expected.attempts + 1
                expected.live, expected.token = False, None

        @rule(entry=entries)
        def time_passes(self, entry: str) -> None:
            expected = self.model.get(entry)
            if expected is None:
                return
            if expected.state == "leased":
                set_work(engine, collection_id, entry, lease_expires_at=PAST)
                expected.live = False
            elif expected.state == "retry":
                set_work(engine, collection_id, entry, next_attempt_at=PAST)
                expected.due = True

        @rule(entry=entries)
        def operator_retry(self, entry: str) -> None:
            expected = self.model.get(entry)
            result = repo.retry_operator_work(collection_id=collection_id, content_id=entry)
            if expected is None:
                # Missing work is created whether or not the content row exists.
                assert (result.outcome, result.changed) == ("pending", True)
                self.model[entry] = Expected(version=1)
            elif expected.state == "pending":
                assert (result.outcome, result.changed) == ("pending", False)
            elif expected.state == "leased" and expected.live:
                assert result.outcome == "lease_active"
            else:
                assert (result.outcome, result.changed) == ("pending", True)
                if expected.token:
                    self.retired[entry].append(expected.token)
                self.model[entry] = Expected(version=expected.version + 1)

        # --- agreement --------------------------------------------------------------------

        @invariant()
        def rows_match_the_model(self) -> None:
            for entry in ENTRIES:
                row = get_work(engine, collection_id, entry)
                expected = self.model.get(entry)
                if expected is None:
                    assert row is None, entry
                    continue
                assert row is not None, entry
                assert (row["work_version"], row["state"], row["attempt_count"]) == (
                    expected.version,
                    expected.state,
                    expected.attempts,
                ), entry
                assert row["lease_token"] == expected.token, entry

        @invariant()
        def due_selection_matches_the_model(self) -> None:
            due = {record.content_id for record in repo.find_due_work(100)}
            assert due == {e for e, x in self.model.items() if x.claimable}

    return WorkMachine


def test_repository_agrees_with_the_model(db: sa.Engine, dialect: str) -> None:
    collection = active_collection(db)
    machine = make_machine(db, collection.id)
    count = examples(30, 60) if dialect == "sqlite" else examples(12, 25)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=count,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


pytestmark = pytest.mark.timeout(600)
