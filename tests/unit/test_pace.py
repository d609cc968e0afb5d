"""The pace of writes and drain ``status`` reports, from two samples (pure)."""

from __future__ import annotations

from media_usage_worker.domain.pace import Sample, pace_between


def sample(second: int, writes: int, queued: int) -> Sample:
    return Sample(f"2026-12-06T10:{second // 60:02d}:{second % 60:02d}.000Z", writes, queued)


def test_a_queue_that_grows_while_writes_outpace_the_drain_is_falling_behind() -> None:
    pace = pace_between(sample(0, 1000, 10), sample(60, 4000, 610))
    assert pace is not None
    assert (pace.writes_per_second, pace.drained_per_second, pace.queued) == (50.0, 40.0, 610)
    assert pace.falling_behind
    assert pace.shown().startswith("falling behind: 50.0 writes/s captured, about 40.0/s")


def test_a_steady_or_shrinking_queue_keeps_up() -> None:
    steady = pace_between(sample(0, 0, 5), sample(60, 600, 8))
    assert steady is not None and not steady.falling_behind
    assert steady.shown().startswith("keeping up: 10.0 writes/s")
    draining = pace_between(sample(0, 0, 5000), sample(60, 600, 100))
    assert draining is not None and not draining.falling_behind
    assert draining.drained_per_second > draining.writes_per_second


def test_a_window_too_short_tells_nothing() -> None:
    assert pace_between(sample(0, 0, 0), sample(5, 100, 100)) is None
