"""Beside a host's own Celery app: importing this project takes nothing over.

Each check runs in a fresh interpreter, in a host directory, as a host process would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.hosts import host_project

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
    assert schedule == ["media-usage-deletion", "media-usage-reconcile", "media-usage-tick"]
    interval = run_in(
        tmp_path,
        "from tasks.app import app; print(app.conf.beat_schedule['media-usage-tick']['schedule'])",
        MEDIA_USAGE_TICK_SECONDS="7",
    )
    assert interval == "7.0"


def test_bind_gives_the_host_app_the_tasks_routes_and_beat_entries(tmp_path: Path) -> None:
    code = """
import json
from tasks import app, BOUND, record
from celery import current_app
route = lambda name: app.amqp.router.route({}, name)["queue"].name
print(json.dumps({
    "current": current_app.main,
    "bound": sorted(BOUND),
    "registered": sorted(n for n in app.tasks if not n.startswith("celery.")),
    "routes": {n: route(n) for n in ["media_usage.tick", "media_usage.process_work",
                                     "host.record"]},
    "beat": sorted(app.conf.beat_schedule),
    "late_ack": app.tasks["media_usage.process_work"].acks_late,
    "shared_task_app": record.app.main,
}))
"""
    seen = json.loads(run_in(host_project(tmp_path), code))
    ours = [
        f"media_usage.{name}"
        for name in ("after_write", "deletion_tick", "process_batch", "process_range",
                     "process_work", "reconcile_tick", "tick")
    ]  # fmt: skip
    assert seen == {
        "current": "host",
        "bound": ours,
        "registered": ["host.record", *ours],
        "routes": {
            "media_usage.tick": "media_usage",
            "media_usage.process_work": "media_usage",
            "host.record": "host",
        },
        "beat": [
            "host-record",
            "media-usage-deletion",
            "media-usage-reconcile",
            "media-usage-tick",
        ],
        "late_ack": True,
        "shared_task_app": "host",
    }


def test_bind_twice_changes_nothing_and_a_clash_binds_nothing(tmp_path: Path) -> None:
    code = """
import json
from celery import Celery
from media_usage_worker.domain.errors import BindingConflict
from media_usage_worker.tasks.binding import bind
from tasks import app
before = (sorted(app.tasks), app.conf.task_routes, sorted(app.conf.beat_schedule))
bind(app)
again = (sorted(app.tasks), app.conf.task_routes, sorted(app.conf.beat_schedule))
other = Celery("other", broker="memory://", set_as_current=False)
@other.task(name="media_usage.tick")
def not_ours():
    pass

try:
    bind(other)
    clash = None
except BindingConflict as exc:
    clash = str(exc)
print(json.dumps({
    "same": before == again,
    "clash": clash,
    "other_got": sorted(n for n in other.tasks if n.startswith("media_usage.")),
}))
"""
    seen = json.loads(run_in(host_project(tmp_path), code))
    assert seen == {
        "same": True,
        "clash": "The host app already has a task named 'media_usage.tick'.",
        "other_got": ["media_usage.tick"],
    }


def test_bind_refuses_a_bad_setting_before_binding_anything(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import tasks"],
        cwd=host_project(tmp_path),
        env={**os.environ, "PYTHONPATH": str(ROOT), "MEDIA_USAGE_BATCH_SIZE": "0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "InvalidSetting: MEDIA_USAGE_BATCH_SIZE must be a positive whole number" in done.stderr
