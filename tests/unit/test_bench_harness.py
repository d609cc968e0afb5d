"""The benchmark harness's arithmetic, checked without servers so ``bench/`` cannot rot unseen.

The benchmarks themselves run on demand (``python -m bench``); these are their pure parts.
"""

from __future__ import annotations

from bench.stats import Figure, alternate, percentile, ratios


def test_alternate_runs_the_sides_in_turn_and_ratios_pair_each_round() -> None:
    calls: list[str] = []

    def side(name: str, values: list[float]):
        remaining = iter(values)

        def run() -> float:
            calls.append(name)
            return next(remaining)

        return run

    a, b, c = alternate(2, side("a", [10.0, 30.0]), side("b", [5.0, 10.0]), side("c", [20.0, 15.0]))
    assert calls == ["a", "b", "c", "a", "b", "c"]
    assert (a, b, c) == ([10.0, 30.0], [5.0, 10.0], [20.0, 15.0])
    assert ratios(a, b) == [2.0, 3.0]
    assert ratios(a, c) == [0.5, 2.0]


def test_percentiles_pick_samples_from_the_ordered_list() -> None:
    samples = [float(v) for v in range(100, 0, -1)]  # 100 .. 1, unordered on purpose
    assert percentile(samples, 50) == 51.0  # index round(49.5) = 50 of 1 .. 100
    assert percentile(samples, 99) == 99.0
    assert percentile(samples, 100) == 100.0
    assert percentile([7.0], 95) == 7.0


def test_a_figure_line_reports_min_median_max_and_count() -> None:
    line = Figure("drain", (3.0, 1.0, 2.0), "items/s").line()
    assert "min      1.00" in line and "median      2.00" in line and "max      3.00" in line
    assert line.endswith("items/s  (n=3)")
