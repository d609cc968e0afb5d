"""A host project beside this one: its own ``tasks.py``, ``beat_schedule.py`` and
``repository.py`` (the names this project's wheel also installs), with its own Celery app, a
shared task on its own queue and its own beat entry, binding this project's tasks onto its app
(``media_usage_worker.tasks.binding.bind``). Its task appends the queue it was delivered on to a
marker file, so a test sees that it ran, and where."""

from __future__ import annotations

from pathlib import Path

HOST_TASKS = """
import os

from celery import Celery, shared_task
from beat_schedule import beat_schedule  # the host's own module of that name
import repository  # the host's own module of that name

app = Celery("host", broker=os.environ.get("HOST_BROKER_URL", "memory://"))
app.conf.task_routes = {"host.*": {"queue": "host"}}
app.conf.beat_schedule = beat_schedule

from media_usage_worker.tasks.binding import bind

BOUND = bind(app)


@shared_task(name="host.record")
def record(path):
    return repository.save(path)
"""

HOST_MODULES = {
    "tasks.py": HOST_TASKS,
    "beat_schedule.py": (
        'beat_schedule = {"host-record": {"task": "host.record", "schedule": 0.5,'
        ' "args": ["{marker}"]}}\n'
    ),
    "repository.py": (
        "import celery\n\n"
        "def save(path):\n"
        "    request = celery.current_task.request\n"
        "    with open(path, 'a') as f:\n"
        "        f.write(request.delivery_info['routing_key'] + '\\n')\n"
        "    return True\n"
    ),
}


def host_project(directory: Path, marker: Path | None = None) -> Path:
    """A host project of its own ``tasks.py``, ``beat_schedule.py`` and ``repository.py``,
    binding this project's tasks onto its app."""
    for name, text in HOST_MODULES.items():
        (directory / name).write_text(text.replace("{marker}", str(marker or directory / "m")))
    return directory
