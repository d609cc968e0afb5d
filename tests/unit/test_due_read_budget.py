"""How much due work a tick reads, given what still waits in the queue."""

from __future__ import annotations

import pytest

from media_usage_worker.pipeline.fan_out import due_read_budget


@pytest.mark.parametrize(
    ("queued", "expected"),
    [
        (None, 5000),  # no depth reading: the budget
        (0, 5000),  # empty queue: read up to the budget
        (49, 2550),  # room for 51 more messages of 50 items
        (24, 3800),  # below the half-budget mark: top up
        (50, 0),  # the waiting messages may hold half the budget: read nothing
        (1000, 0),
    ],
)
def test_a_stocked_queue_is_not_read_again(queued: int | None, expected: int) -> None:
    budget = due_read_budget(queued, budget=5000, max_queued=100, batch_size=50)
    assert budget == expected


def test_single_item_messages_count_as_full_batches() -> None:
    # Conservative: 3 waiting messages might be 150 items, so a small budget waits a tick.
    assert due_read_budget(3, budget=200, max_queued=1000, batch_size=50) == 0
    assert due_read_budget(1, budget=200, max_queued=1000, batch_size=50) == 200
