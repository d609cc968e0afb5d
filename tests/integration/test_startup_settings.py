"""A worker or beat that runs this project's tasks stops at start-up on a bad setting, with one
line naming it; a host's own worker in the same environment is not stopped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import ROOT, wait_for

BAD = {"MEDIA_USAGE_TICK_SECONDS": "abc", "MEDIA_USAGE_BATCH_SIZE": "5000"}
SAYS = (
    "media-usage: MEDIA_USAGE_TICK_SECONDS must be a positive whole number, not 'abc'. "
    "MEDIA_USAGE_BATCH_SIZE must be from 1 to 1000, not 5000."
)


def celery(directory: Path, app: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", app, *args],
        cwd=directory,
        env={**os.environ, "PYTHONPATH": str(ROOT), "MEDIA_USAGE_BROKER_URL": "memory://", **BAD},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.parametrize(
    "args", [["worker", "--pool", "solo", "--without-mingle"], ["beat", "-s", "{tmp}/schedule"]]
)
def test_a_bad_setting_stops_the_worker_and_beat_with_one_line(tmp_path: Path, args) -> None:
    proc = celery(tmp_path, "tasks", *[a.replace("{tmp}", str(tmp_path)) for a in args])
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, output
    said = [line for line in output.splitlines() if "media-usage:" in line]
    assert len(said) == 1 and said[0].endswith(SAYS), output
    assert "Traceback" not in output


def test_a_hosts_own_worker_is_not_stopped_by_this_projects_settings(tmp_path: Path) -> None:
    """The host imports this project (for ``after_write``) but runs none of its tasks."""
    (tmp_path / "host.py").write_text(
        "from celery import Celery\n"
        "import tasks.dispatch  # noqa\n"
        "app = Celery('host', broker='memory://')\n"
    )
    log = tmp_path / "worker.log"
    proc = celery(tmp_path, "host", "worker", "--pool", "solo", "-l", "info", "--logfile", str(log))
    try:
        wait_for(lambda: log.exists() and "ready." in log.read_text(), timeout=60)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.communicate(timeout=30)


def test_a_worker_pointed_nowhere_says_which_setting_to_give(tmp_path: Path) -> None:
    """No broker URL: one line says what it connects to instead and which variable to set,
    before Celery's own retries (which name only a transport class)."""
    log = tmp_path / "worker.log"
    env = {k: v for k, v in os.environ.items() if k != "MEDIA_USAGE_BROKER_URL"}
    with open(log, "wb") as output:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tasks", "worker", "--pool", "solo"],
            cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)}, stdout=output,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for(lambda: "MEDIA_USAGE_BROKER_URL is not set" in log.read_text(), timeout=60)
        (line,) = [x for x in log.read_text().splitlines() if "is not set" in x]
        assert line.startswith("media-usage: ") and "redis://localhost:6379/0" in line
    finally:
        proc.kill()
        proc.communicate(timeout=30)
