"""CPU per item of (d) and (e): what bounds d/e on a machine whose cores are all busy.

``python -m bench cpu``: for each side, the machine's busy core-seconds (/proc/stat) over the
timed part, per item, and the cores kept busy on average. Sides alternate, as everywhere.
"""

from __future__ import annotations

from bench.drain import pipeline
from bench.env import Bench
from bench.rebuild import rebuild
from bench.stats import Figure, alternate


def run(bench: Bench, entries: int, repeat: int, workers: int = 2) -> list[str]:
    costs: dict[str, list[float]] = {"d": [], "e": []}
    busy: dict[str, list[float]] = {"d": [], "e": []}

    def measured(side: str, measure) -> float:
        cpu: dict[str, float] = {}
        rate = measure(cpu)
        costs[side].append(cpu["busy_core_seconds"] * 1000 / entries)
        busy[side].append(cpu["busy_core_seconds"] * rate / entries)
        return rate

    alternate(
        repeat,
        lambda: measured("d", lambda cpu: pipeline(bench, "postgresql", entries, workers, cpu=cpu)),
        lambda: measured("e", lambda cpu: rebuild(bench, "postgresql", entries, cpu=cpu)),
    )
    lines = []
    for side, name in (("d", f"(d) batches, {workers} workers"), ("e", "(e) rebuild")):
        lines.append(Figure(f"cpu {name}", tuple(costs[side]), "core-ms/item").line())
        lines.append(Figure(f"cpu {name} cores busy", tuple(busy[side]), "cores").line())
    return lines
