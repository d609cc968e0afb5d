"""Beside a host's own Celery app (issue 22): importing this project takes nothing over.

Each check runs in a fresh interpreter, in a host directory, as a host process would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_in(directory: Path, code: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],  # "-c": the host's directory comes first on sys.path
        cwd=directory,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


HOST = """
import json
from celery import Celery, current_app, shared_task
from celery._state import default_app

host = Celery("host", broker="memory://")

@shared_task
def host_job():
    return 1

import tasks.dispatch  # what a host imports for after_write
from tasks.app import app as ours

print(json.dumps({
    "current": current_app.main,
    "default_is_ours": default_app is ours,
    "shared_task_app": host_job.app.main,
    "host_has_ours": any(name.startswith("media_usage.") for name in host.tasks),
}))
"""


def test_importing_the_project_leaves_the_host_app_current(tmp_path: Path) -> None:
    seen = json.loads(run_in(tmp_path, HOST))
    assert seen == {
        "current": "host",
        "default_is_ours": False,
        "shared_task_app": "host",
        "host_has_ours": False,
    }


def test_the_app_loads_its_own_schedule_whatever_the_directory_holds(tmp_path: Path) -> None:
    (tmp_path / "beat_schedule.py").write_text('beat_schedule = {"host-entry": {}}\n')
    code = (
        "import json; from tasks.app import app; print(json.dumps(sorted(app.conf.beat_schedule)))"
    )
    schedule = json.loads(run_in(tmp_path, code, MEDIA_USAGE_TICK_SECONDS="7"))
    assert schedule == ["media-usage-reconcile", "media-usage-tick"]
    interval = run_in(
        tmp_path,
        "from tasks.app import app; print(app.conf.beat_schedule['media-usage-tick']['schedule'])",
        MEDIA_USAGE_TICK_SECONDS="7",
    )
    assert interval == "7.0"
