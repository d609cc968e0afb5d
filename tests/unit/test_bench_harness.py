"""The benchmark harness's arithmetic, checked without servers so ``bench/`` cannot rot unseen.

The benchmarks themselves run on demand (``python -m bench``); these are their pure parts.
"""

from __future__ import annotations

from bench.stats import Figure, alternate, percentile


def test_alternate_runs_the_sides_in_turn_and_pairs_each_ratio_with_its_own_round() -> None:
    calls: list[str] = []
    a_values, b_values = iter([10.0, 30.0]), iter([5.0, 10.0])

    def a() -> float:
        calls.append("a")
        return next(a_values)

    def b() -> float:
        calls.append("b")
        return next(b_values)

    xs, ys, ratios = alternate(2, a, b)
    assert calls == ["a", "b", "a", "b"]
    assert (xs, ys, ratios) == ([10.0, 30.0], [5.0, 10.0], [2.0, 3.0])


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
