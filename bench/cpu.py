"""CPU per item of (a), (d) and (e): what bounds d/e and (a) on a machine whose cores are all
busy.

``python -m bench cpu``: for each side, the machine's busy core-seconds (/proc/stat) over the
timed part, per item, and the cores kept busy on average. Sides alternate, as everywhere.
"""

from __future__ import annotations

from bench.drain import pipeline
from bench.env import Bench
from bench.rebuild import rebuild
from bench.stats import Figure, alternate

SIDES = (
    ("a", "(a) item by item"),
    ("d", "(d) batches"),
    ("e", "(e) rebuild"),
)


def run(bench: Bench, entries: int, repeat: int, workers: int = 2) -> list[str]:
    costs: dict[str, list[float]] = {side: [] for side, _ in SIDES}
    busy: dict[str, list[float]] = {side: [] for side, _ in SIDES}

    def measured(side: str, measure) -> float:
        cpu: dict[str, float] = {}
        rate = measure(cpu)
        costs[side].append(cpu["busy_core_seconds"] * 1000 / entries)
        busy[side].append(cpu["busy_core_seconds"] * rate / entries)
        return rate

    def drain(batched: bool):
        return lambda cpu: pipeline(bench, "postgresql", entries, workers, batched=batched, cpu=cpu)

    alternate(
        repeat,
        lambda: measured("a", drain(batched=False)),
        lambda: measured("d", drain(batched=True)),
        lambda: measured("e", lambda cpu: rebuild(bench, "postgresql", entries, cpu=cpu)),
    )
    lines = []
    for side, name in SIDES:
        # (e) is one process whatever the worker count.
        name = name if side == "e" else f"{name}, {workers} workers"
        lines.append(Figure(f"cpu {name}", tuple(costs[side]), "core-ms/item").line())
        lines.append(Figure(f"cpu {name} cores busy", tuple(busy[side]), "cores").line())
    return lines
