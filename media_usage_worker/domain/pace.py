"""Whether the workers keep up with the site's writes (docs/design.md §5, "Falling behind").

Two samples of the dispatch tick, a minute apart, give the writes captured per second (the
epochs moved) and how the queue of writes changed; what was drained is the difference. The
queue growing over the whole window while writes outpace the drain is "falling behind": a
reconciliation still ends, but ``complete`` waits until the writes slow down.
"""

from __future__ import annotations

from dataclasses import dataclass

from media_usage_worker.domain.timestamps import seconds_between

# The shortest window that gives a rate worth showing.
MIN_WINDOW_SECONDS = 10.0
# A queue that grew by fewer rows than this over the window is noise, not a trend.
MIN_GROWTH = 50


@dataclass(frozen=True)
class Sample:
    at: str  # the database's clock
    writes: int  # writes captured so far (every scope's change epoch, summed)
    queued: int  # writes waiting (work rows that are not a running reconciliation's own)


@dataclass(frozen=True)
class Pace:
    seconds: float
    writes_per_second: float
    drained_per_second: float
    queued: int
    falling_behind: bool

    def shown(self) -> str:
        rates = (
            f"{self.writes_per_second:.1f} writes/s captured, about "
            f"{self.drained_per_second:.1f}/s indexed, {self.queued} queued "
            f"(last {self.seconds:.0f} s)"
        )
        return f"falling behind: {rates}" if self.falling_behind else f"keeping up: {rates}"


def pace_between(first: Sample, last: Sample) -> Pace | None:
    """The pace from ``first`` to ``last``; ``None`` for a window too short to tell."""
    seconds = seconds_between(first.at, last.at)
    if seconds < MIN_WINDOW_SECONDS:
        return None
    writes = max(0, last.writes - first.writes) / seconds
    growth = last.queued - first.queued
    drained = max(0.0, writes - growth / seconds)
    behind = growth >= MIN_GROWTH and writes > drained
    return Pace(round(seconds, 1), round(writes, 2), round(drained, 2), last.queued, behind)
