"""Bound into a host's app: a host project with its own ``tasks.py``, shared
task, routes and beat schedule calls ``bind(app)``; one worker and one beat of the host's run
both sets of tasks, each on its queue, and the index follows the host's content writes."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from media_usage_worker.api import MediaUsage
from media_usage_worker.domain.content_model import FieldDefinition
from tests.hosts import host_project
from tests.processes import ROOT, Processes, wait_for, work_rows
from tests.support import active_collection


def test_the_hosts_worker_and_beat_run_both_sets_of_tasks(
    db: sa.Engine, task_env: dict[str, str], tmp_path: Path
) -> None:
    active_collection(db, "posts", [FieldDefinition("hero", "Hero", "image")])
    with db.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO ec_posts (id, hero) VALUES (:id, :hero)"),
            [{"id": f"e{i}", "hero": "m-a"} for i in range(10)],
        )
    marker = tmp_path / "host-ran.txt"
    host = tmp_path / "host"
    host.mkdir()
    host_project(host, marker)
    # The host's broker is another Redis database than MEDIA_USAGE_BROKER_URL: work messages a
    # bound tick sends must go through the host's app, or no worker would ever see them.
    ours = task_env["MEDIA_USAGE_BROKER_URL"]
    env = {
        **task_env,
        "HOST_BROKER_URL": ours.rsplit("/", 1)[0] + "/7",
        "PYTHONPATH": str(ROOT),
    }
    processes = Processes(env, tmp_path, cwd=host)
    try:
        processes.worker(concurrency=2, queues="host,media_usage")
        processes.beat()
        index = MediaUsage(db)
        wait_for(lambda: len(index.usage("m-a").entries) == 10, timeout=120, interval=0.5)
        assert work_rows(db) == 0
        wait_for(lambda: marker.exists() and "host" in marker.read_text(), timeout=60)
        assert set(marker.read_text().split()) == {"host"}  # the host's task, on its queue
        logs = processes.logs()
        assert "media_usage.tick" in logs and "host.record" in logs
    finally:
        processes.stop_all()
