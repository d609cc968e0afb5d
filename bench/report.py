"""``python -m bench report``: the figures of docs/benchmarks.md as charts.

The figures live in ``docs/benchmarks/figures.json`` (each with the section that measured it);
this draws them into ``docs/benchmarks/*.png``, which the doc embeds. Re-run it after a
benchmark changes a figure there. Needs matplotlib (the ``bench`` extra).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "benchmarks" / "figures.json"
OUT = ROOT / "docs" / "benchmarks"
DIALECTS = ("PostgreSQL", "SQLite")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
    return plt


def _save(plt: Any, figure: Any, path: Path) -> str:
    figure.tight_layout()
    # No timestamps or software versions in the file: the same figures draw the same bytes.
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)
    return f"report: {path}"


def _points(sizes: list[int], values: list[float | None]) -> tuple[list[int], list[float]]:
    pairs = [(s, v) for s, v in zip(sizes, values, strict=True) if v is not None]
    return [s for s, _ in pairs], [v for _, v in pairs]


def backfill_throughput(plt: Any, data: dict[str, Any], out: Path) -> str:
    figure, axes = plt.subplots(figsize=(6.4, 3.6))
    for label, values in data["series"].items():
        xs, ys = _points(data["sizes"], values)
        axes.plot(xs, ys, marker="o", label=label)
    axes.set_xscale("log")
    axes.set_xlabel("entries")
    axes.set_ylabel(data["unit"])
    axes.set_ylim(bottom=0)
    axes.set_title(f"Backfill throughput against size (§{data['section']})")
    axes.legend(fontsize=7)
    return _save(plt, figure, out / "backfill-throughput.png")


def backfill_under_writes(plt: Any, data: dict[str, Any], out: Path) -> str:
    figure, (left, right) = plt.subplots(1, 2, figsize=(8.4, 3.4))
    rates = [str(r) for r in data["rates"]]
    width = 0.38
    for n, dialect in enumerate(DIALECTS):
        offset = [i + (n - 0.5) * width for i in range(len(rates))]
        color = f"C{n}"  # one colour per dialect, one line style per quantile
        left.bar(offset, data["complete_seconds"][dialect], width, label=dialect, color=color)
        latency = data["fast_path_ms"][dialect]
        xs = [r for r, v in zip(rates, latency["p99"], strict=True) if v is not None]
        for quantile, style in (("p50", ":"), ("p95", "--"), ("p99", "-")):
            ys = [v for v in latency[quantile] if v is not None]
            right.plot(xs, ys, style, color=color, marker="o", label=f"{dialect} {quantile}")
    left.set_xticks(range(len(rates)), rates)
    left.set_xlabel("new entries written per second during the backfill")
    left.set_ylabel("activation → complete, s")
    left.set_title(f"20,000 entries under writes (§{data['section']})")
    left.legend(fontsize=7)
    right.set_xlabel("writes per second")
    right.set_ylabel("fast path, commit → indexed, ms")
    right.set_title("Fast-path latency beside it")
    right.legend(fontsize=6, ncol=2)
    return _save(plt, figure, out / "backfill-under-writes.png")


def _p50_p99_bars(plt: Any, data: dict[str, Any], names: list[str], title: str, out: Path) -> str:
    figure, axes = plt.subplots(figsize=(7.2, 3.6))
    width = 0.2
    column = 0
    for dialect in DIALECTS:
        for quantile in ("p50", "p99"):
            offset = [i + (column - 1.5) * width for i in range(len(names))]
            axes.bar(offset, data[dialect][quantile], width, label=f"{dialect} {quantile}")
            column += 1
    if "target_p99" in data:
        axes.axhline(data["target_p99"], color="black", linewidth=0.8, linestyle="--")
        axes.annotate("target p99", (len(names) - 0.6, data["target_p99"]), fontsize=7)
    axes.set_xticks(range(len(names)), names, rotation=20, ha="right")
    axes.set_ylabel(data["unit"])
    axes.set_title(f"{title} (§{data['section']})")
    axes.legend(fontsize=7)
    return _save(plt, figure, out)


def http_shapes(plt: Any, data: dict[str, Any], out: Path) -> str:
    figure, (left, right) = plt.subplots(1, 2, figsize=(8.4, 3.4))
    shapes = data["shapes"]
    width = 0.38
    for n, dialect in enumerate(DIALECTS):
        offset = [i + (n - 0.5) * width for i in range(len(shapes))]
        left.bar(offset, data["requests_per_second"][dialect], width, label=dialect)
        right.bar(offset, data["p99_ms"][dialect], width, label=dialect)
    left.axhline(data["target_requests_per_second"], color="black", linewidth=0.8, ls="--")
    left.set_ylabel("requests/s, 50 clients")
    left.set_title(f"HTTP /v1/usage by server shape (§{data['section']})")
    right.set_ylabel("p99, ms")
    right.set_title("Its p99")
    for axes in (left, right):
        axes.set_xticks(range(len(shapes)), shapes)
        axes.set_xlabel("processes x threads")
        axes.legend(fontsize=7)
    return _save(plt, figure, out / "http.png")


def run(out: Path = OUT) -> list[str]:
    """Draw every chart into ``out``; a line per file."""
    plt = _pyplot()
    figures = json.loads(FIGURES.read_text())
    reads, console = figures["reads"], figures["console"]
    return [
        backfill_throughput(plt, figures["backfill_throughput"], out),
        backfill_under_writes(plt, figures["backfill_under_writes"], out),
        http_shapes(plt, figures["http"], out),
        _p50_p99_bars(plt, reads, reads["reads"], "Reads at 100,000 entries", out / "reads.png"),
        _p50_p99_bars(
            plt, console, console["pages"], "Console pages at 100,000 entries",
            out / "console.png",
        ),
    ]  # fmt: skip
