"""The overview's chart of the last hour, drawn on the server as SVG (no script, no CDN).

Two series from the dispatch tick's samples: the work queued at each sample, and what was
indexed per second between two samples (the writes captured minus the queue's growth). Pure:
samples in, markup out; every number is formatted here, so no text reaches the markup.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from media_usage_worker.domain.pace import Sample
from media_usage_worker.domain.timestamps import seconds_between

WIDTH, HEIGHT, PAD = 600, 120, 4


@dataclass(frozen=True)
class Series:
    """One line of the chart: (seconds since the first sample, value) points."""

    label: str
    points: tuple[tuple[float, float], ...]

    @property
    def last(self) -> float | None:
        return self.points[-1][1] if self.points else None

    @property
    def peak(self) -> float:
        return max((v for _, v in self.points), default=0.0)


def series(samples: Sequence[Sample]) -> tuple[Series, Series]:
    """The queue, and the indexing rate (items per second), over the samples."""
    if not samples:
        return Series("queued", ()), Series("indexed per second", ())
    start = samples[0].at
    queued = tuple((seconds_between(start, s.at), float(s.queued)) for s in samples)
    rates: list[tuple[float, float]] = []
    for before, after in itertools.pairwise(samples):
        seconds = seconds_between(before.at, after.at)
        if seconds <= 0:
            continue
        drained = (after.writes - before.writes) - (after.queued - before.queued)
        rates.append((seconds_between(start, after.at), max(drained, 0) / seconds))
    return Series("queued", queued), Series("indexed per second", tuple(rates))


def _polyline(line: Series, span: float) -> str:
    top = line.peak or 1.0
    coordinates = " ".join(
        f"{PAD + (x / span) * (WIDTH - 2 * PAD):.1f},"
        f"{HEIGHT - PAD - (y / top) * (HEIGHT - 2 * PAD):.1f}"
        for x, y in line.points
    )
    return coordinates


def svg(queued: Series, rate: Series) -> str:
    """Both lines on one frame, each scaled to its own peak (the legend gives the peaks)."""
    span = max([x for x, _ in queued.points + rate.points] + [1.0])
    lines = [
        f'<polyline class="chart-{name}" fill="none" points="{_polyline(s, span)}"/>'
        for name, s in (("queued", queued), ("rate", rate))
        if s.points
    ]
    return (
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" class="chart" role="img" '
        'aria-label="Work queued and items indexed per second over the last hour">'
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" class="chart-frame"/>'
        + "".join(lines)
        + "</svg>"
    )
