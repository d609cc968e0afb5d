"""docs/operations.md names every state and runbooks every error code an operator can meet."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from media_usage_worker.domain import vocabulary as v

OPERATIONS = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
STATES = [v.CoverageStatus, v.CaptureState, v.ActivationState, v.WorkState, v.Outcome]


@pytest.mark.parametrize("value", [m.value for enum in STATES for m in enum])
def test_every_state_is_in_the_states_table(value: str) -> None:
    section = OPERATIONS[OPERATIONS.index("## States") : OPERATIONS.index("## Runbook")]
    assert f"`{value}`" in section


@pytest.mark.parametrize("code", [c.value for c in v.ErrorCode])
def test_every_stored_error_code_has_a_runbook_row(code: str) -> None:
    section = OPERATIONS[OPERATIONS.index("## Runbook") : OPERATIONS.index("## Upgrading")]
    assert f"| `{code}` |" in section


@pytest.mark.parametrize(
    "heading",
    [
        "## Reconciliation",
        "## Upgrading",
        "## Deactivating and uninstalling",
        "## Beside an existing Celery app",
    ],
)
def test_the_operator_sections_exist(heading: str) -> None:
    assert f"\n{heading}\n" in OPERATIONS


SETTINGS_SOURCES = [
    "media_usage_worker/tasks/settings.py",
    "media_usage_worker/domain/policy.py",
    "media_usage_worker/http/settings.py",
]


@pytest.mark.parametrize(
    "name",
    sorted(
        {
            name
            for source in SETTINGS_SOURCES
            for name in re.findall(
                r'"(MEDIA_USAGE_[A-Z_]+)"',
                (Path(__file__).resolve().parents[2] / source).read_text(),
            )
        }
    ),
)
def test_every_setting_is_documented(name: str) -> None:
    assert f"`{name}`" in OPERATIONS


def test_the_grafana_dashboard_reads_only_metrics_the_api_exports() -> None:
    import json

    root = Path(__file__).resolve().parents[2]
    dashboard = json.loads((root / "docs" / "grafana" / "media-usage.json").read_text())
    exported = set(
        re.findall(
            r'"(media_usage_[a-z_]+)"|gauge\(\s*"([a-z_]+)"',
            (root / "media_usage_worker" / "http" / "metrics.py").read_text(),
        )
    )
    names = {a or f"media_usage_{b}" for a, b in exported}
    used = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"media_usage_[a-z_]+", target["expr"])
    }
    assert used and used <= names, used - names
