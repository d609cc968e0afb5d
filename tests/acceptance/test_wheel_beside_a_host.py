"""The built wheel beside a host project.

The wheel is installed into a fresh virtual environment (its dependencies come from the test
environment through a ``.pth`` file, so nothing is downloaded). The host project has a
``tasks.py``, a ``repository.py`` and a ``beat_schedule.py`` of its own, which come first on
its ``sys.path``: its own code keeps working, it asks this project's worker (a separate service
started from the wheel with ``celery -A tasks``) to index a write by task name, without
importing this project, and it reads the answer through ``media_usage_worker.api``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from media_usage_worker.domain.content_model import FieldDefinition
from tests.support import active_collection

ROOT = Path(__file__).resolve().parents[2]

HOST_FILES = {
    "tasks.py": (
        "import os\n"
        "from celery import Celery, shared_task\n\n"
        "app = Celery('host', broker=os.environ['HOST_BROKER_URL'])\n\n\n"
        "@shared_task(name='host.greet')\n"
        "def greet(name):\n"
        "    return f'hello {name}'\n"
    ),
    "repository.py": (
        "import sqlalchemy as sa\n\n\n"
        "def write_post(url, content_id, hero):\n"
        "    engine = sa.create_engine(url)\n"
        "    with engine.begin() as conn:\n"
        "        conn.execute(sa.text('INSERT INTO ec_posts (id, hero) VALUES (:i, :h)'),\n"
        "                     {'i': content_id, 'h': hero})\n"
        "    engine.dispose()\n"
    ),
    "beat_schedule.py": "beat_schedule = {'host-greet': {'task': 'host.greet', 'schedule': 60}}\n",
    "host_main.py": (
        "import json, os, time\n"
        "import beat_schedule, repository, tasks  # the host's own modules\n"
        "url = os.environ['MEDIA_USAGE_DATABASE_URL']\n"
        "repository.write_post(url, 'e1', 'm-a')\n"
        "sent = tasks.app.send_task('media_usage.after_write', args=['posts', 'e1'],\n"
        "                           queue='media_usage')\n"
        "from media_usage_worker.api import MediaUsage\n"
        "entries = []\n"
        "with MediaUsage.connect(url) as index:\n"
        "    deadline = time.monotonic() + 90\n"
        "    while not entries and time.monotonic() < deadline:\n"
        "        entries = [e.content_id for e in index.usage('m-a').entries]\n"
        "        time.sleep(0.2)\n"
        "    unused = index.is_unused('m-a')\n"
        "import media_usage_worker\n"
        "print(json.dumps({\n"
        "    'greet': tasks.greet.apply(args=['host']).get(),\n"
        "    'schedule': sorted(beat_schedule.beat_schedule),\n"
        "    'host_tasks_are_ours': any(n.startswith('media_usage.') for n in tasks.app.tasks),\n"
        "    'sent': bool(sent.id),\n"
        "    'entries': entries,\n"
        "    'unused': unused,\n"
        "    'installed_from': media_usage_worker.__file__,\n"
        "}))\n"
    ),
}


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel built from this checkout; its python."""
    base = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(base)])
    (wheel,) = base.glob("media_usage_worker-*.whl")
    venv = base / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = Path(
        run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    )
    run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
         str(wheel)])  # fmt: skip
    # The dependencies, from this environment's site-packages (its .pth files, among them the
    # editable install of this checkout, are not read from there).
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "zz_test_dependencies.pth").write_text("\n".join(sorted(deps)) + "\n")
    return python


def run(args: list[str], **kwargs: Any) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, **kwargs)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without anything that would put the checkout on ``sys.path``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return {**env, **extra}


def test_the_wheel_serves_a_host_with_its_own_tasks_repository_and_beat_schedule(
    db: sa.Engine, migrated_url: str, task_env: dict[str, str], wheel_venv: Path, tmp_path: Path
) -> None:
    active_collection(db, "posts", [FieldDefinition("hero", "Hero", "image")])
    env = clean_env(**task_env, HOST_BROKER_URL=task_env["MEDIA_USAGE_BROKER_URL"])
    host = tmp_path / "host"
    host.mkdir()
    for name, text in HOST_FILES.items():
        (host / name).write_text(text)
    log = tmp_path / "worker.log"
    # This project's worker, a separate service started from the wheel in a directory of its own.
    with open(log, "wb") as output:
        worker = subprocess.Popen(
            [str(wheel_venv), "-m", "celery", "-A", "tasks", "worker", "-Q", "media_usage",
             "-c", "1", "-l", "info"],
            cwd=tmp_path, env=env, stdout=output, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        seen = json.loads(run([str(wheel_venv), "host_main.py"], cwd=host, env=env))
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
    assert seen["installed_from"].startswith(str(wheel_venv.parents[1])), seen
    assert seen == {
        "greet": "hello host",  # the host's own tasks.py, repository.py, beat_schedule.py
        "schedule": ["host-greet"],
        "host_tasks_are_ours": False,
        "sent": True,
        "entries": ["e1"],  # indexed by the wheel's worker, read through the read API
        "unused": None,  # coverage never reconciled: "unused" cannot be claimed
        "installed_from": seen["installed_from"],
    }, log.read_text()
