"""``python -m bench report``: every chart docs/benchmarks.md embeds is drawn, and every number
it charts is one that page states (so a chart cannot drift from the tables beside it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench import report

DOC = (report.ROOT / "docs" / "benchmarks.md").read_text()
PNG = b"\x89PNG\r\n\x1a\n"


def _numbers(value: object) -> list[float]:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return []
    if isinstance(value, int | float):
        return [value]
    if isinstance(value, list):
        return [n for item in value for n in _numbers(item)]
    if isinstance(value, dict):
        return [n for key, item in value.items() if key != "section" for n in _numbers(item)]
    raise AssertionError(f"unexpected {value!r}")


def _stated(number: float) -> bool:
    """As the page writes it: thousands with commas, decimals as measured."""
    shown = f"{number:,}" if isinstance(number, int) else str(number)
    return re.search(rf"(?<![\d.,]){re.escape(shown)}(?![\d]|\.\d)", DOC) is not None


def test_the_report_draws_every_chart_the_page_embeds(tmp_path: Path) -> None:
    drawn = {Path(line.removeprefix("report: ")).name for line in report.run(tmp_path)}
    embedded = set(re.findall(r"\]\(benchmarks/([\w-]+\.png)\)", DOC))
    assert drawn == embedded
    for name in drawn:
        assert (tmp_path / name).read_bytes().startswith(PNG)
        assert (report.OUT / name).read_bytes().startswith(PNG), f"{name} is not committed"


def test_every_charted_number_is_stated_on_the_page() -> None:
    figures = json.loads(report.FIGURES.read_text())
    charted = {k: v for k, v in figures.items() if not k.startswith("_")}
    missing = sorted({n for n in _numbers(charted) if not _stated(n)})
    # Sizes, rates and targets are the tables' headings; the rest are their cells.
    assert missing == [], f"charted but not on the page: {missing}"
