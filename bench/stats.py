"""Figures over repeated runs, and A/B comparisons measured alternately in one run."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    name: str
    values: tuple[float, ...]
    unit: str

    def line(self) -> str:
        v = self.values
        return (f"{self.name:<48} min {min(v):>9.2f}  median {statistics.median(v):>9.2f}  "
                f"max {max(v):>9.2f} {self.unit}  (n={len(v)})")  # fmt: skip


def percentile(samples: Sequence[float], p: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def alternate(repeat: int, *sides: Callable[[], float]) -> list[list[float]]:
    """Run A B C A B C ... so drift of the machine hits every side alike; one list per side."""
    values: list[list[float]] = [[] for _ in sides]
    for _ in range(repeat):
        for measured, side in zip(values, sides, strict=True):
            measured.append(side())
    return values


def ratios(xs: Sequence[float], ys: Sequence[float]) -> list[float]:
    """x/y round by round: each ratio pairs two runs made next to each other."""
    return [x / y for x, y in zip(xs, ys, strict=True)]
