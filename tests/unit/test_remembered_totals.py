"""The unused selection's remembered totals: a hit, an age limit and a bounded size."""

from __future__ import annotations

from media_usage_worker.domain.remembered import RememberedTotals


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_totals_are_recalled_for_the_same_state_only() -> None:
    remembered = RememberedTotals()
    assert remembered.recall(("a", 1)) is None
    remembered.remember(("a", 1), (3, 600))
    assert remembered.recall(("a", 1)) == (3, 600)
    assert remembered.recall(("a", 2)) is None
    assert (remembered.hits, remembered.misses) == (1, 2)


def test_totals_older_than_the_age_limit_are_counted_again() -> None:
    clock = Clock()
    remembered = RememberedTotals(max_age_seconds=60, clock=clock)
    remembered.remember("state", (1, 1))
    clock.now = 60.0
    assert remembered.recall("state") == (1, 1)
    clock.now = 60.5
    assert remembered.recall("state") is None
    assert remembered.recall("state") is None  # forgotten, not only hidden


def test_the_least_recently_used_state_is_forgotten_first() -> None:
    remembered = RememberedTotals(capacity=2)
    remembered.remember("a", (1, 1))
    remembered.remember("b", (2, 2))
    assert remembered.recall("a") == (1, 1)  # now "b" is the oldest
    remembered.remember("c", (3, 3))
    assert remembered.recall("b") is None
    assert remembered.recall("a") == (1, 1) and remembered.recall("c") == (3, 3)
    remembered.forget()
    assert remembered.recall("a") is None
