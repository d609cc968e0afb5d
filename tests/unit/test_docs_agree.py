"""The docs say what the code does: no timings the benchmarks did not measure, the capture
values and task names the code has, and as many alerts and beat entries as they promise."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from media_usage_worker.domain.vocabulary import ActivationState, DeletionOutcome, RetryOutcome
from media_usage_worker.tasks.app import TASKS, app
from media_usage_worker.tasks.schedule import beat_schedule

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
API = (ROOT / "docs" / "api.md").read_text()
CLI = (ROOT / "docs" / "cli.md").read_text()
OPERATIONS = (ROOT / "docs" / "operations.md").read_text()

# "about 70 s", "~4 min", "(12 minutes)": a duration stated as a fact of this machine.
TIMING = re.compile(r"(?:about|~|≈)\s*\d[\d,.]*\s*(?:s|sec|seconds|min|minutes)\b", re.IGNORECASE)


def test_the_readme_states_no_timings_of_its_own() -> None:
    # Measured figures live in docs/benchmarks.md, with the command that measured them.
    assert TIMING.findall(README) == []


def test_every_capture_value_is_in_the_api_docs() -> None:
    row = next(line for line in API.splitlines() if line.startswith("| `status()` |"))
    for state in ActivationState:
        assert f"`{state.value}`" in row
    assert "`inactive`" not in row


def test_the_alerts_are_counted_right() -> None:
    rules = API[API.index("groups:") :]
    count = len(re.findall(r"^\s+- alert: ", rules, flags=re.MULTILINE))
    assert count == 4
    assert "three alerts" not in API.lower()


def test_the_beat_entries_bind_adds_are_counted_right() -> None:
    words = {2: "two", 3: "three", 4: "four"}
    said = words[len(beat_schedule)]
    assert f"{said} beat entries" in OPERATIONS
    assert f"{said} beat\nentries" in README or f"{said} beat entries" in README


def test_the_flower_section_names_every_task() -> None:
    section = OPERATIONS[OPERATIONS.index("## Flower") : OPERATIONS.index("## Limits")]
    assert len(TASKS) >= 6
    for spec in TASKS:
        assert spec.name in app.tasks
        assert f"`{spec.name}`" in section


@pytest.mark.parametrize("outcome", [*RetryOutcome, *DeletionOutcome])
def test_every_operator_outcome_is_in_the_cli_docs(outcome: str) -> None:
    assert f"`{outcome}`" in CLI or outcome in ("pending", "deleted")
