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


def alternate(
    repeat: int, a: Callable[[], float], b: Callable[[], float]
) -> tuple[list[float], list[float], list[float]]:
    """Run A B A B ... so drift of the machine hits both sides alike; returns a, b and a/b."""
    xs, ys = [], []
    for _ in range(repeat):
        xs.append(a())
        ys.append(b())
    return xs, ys, [x / y for x, y in zip(xs, ys, strict=True)]
