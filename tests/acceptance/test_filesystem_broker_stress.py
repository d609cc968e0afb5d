"""The embedded default under load: beat and two workers on the server-less filesystem broker
carry thousands of messages (one item each) while junk keeps landing in the queue folder
(empty files, text that is not JSON, JSON that is not a message). Every entry is indexed, both
workers are still alive at the end, and the junk was set aside or dropped, never raised."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from media_usage_worker.domain.content_model import FieldDefinition
from tests.processes import wait_for
from tests.support import active_collection

ENTRIES = 2000
JUNK = (b"", b"not json", b"[1, 2]", b'{"foreign": true}', b'{"torn": "mess')


def _indexed(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        waiting = conn.execute(
            sa.text("SELECT count(*) FROM _emdash_media_usage_work")
        ).scalar_one()
        done = conn.execute(
            sa.text("SELECT count(DISTINCT content_id) FROM _emdash_media_usage_sources "
                    "WHERE collection_slug = 'posts'")
        ).scalar_one()  # fmt: skip
    return done if waiting == 0 else -1


# The broker is what is under test, and the server-less broker is the small site's, whose
# database is SQLite; the pipeline's SQL runs on both dialects in the rest of the suite.
@pytest.mark.parametrize("dialect", ["sqlite"], indirect=True)
def test_thousands_of_messages_and_junk_files_on_the_filesystem_broker(
    db, processes, tmp_path: Path
) -> None:
    folder = tmp_path / "broker"
    processes.env.update(
        {
            "MEDIA_USAGE_BROKER_URL": "filesystem://",
            "MEDIA_USAGE_BROKER_FOLDER": str(folder),
            "MEDIA_USAGE_BATCH_SIZE": "1",  # a message per item: thousands of files
            "MEDIA_USAGE_MAX_QUEUED": "500",
        }
    )
    active_collection(db, "posts", [FieldDefinition("hero", "Hero", "image")])
    with db.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO ec_posts (id, hero) VALUES (:id, :m)"),
            [{"id": f"e{n:05d}", "m": f"m{n % 50}"} for n in range(ENTRIES)],
        )
    workers = [processes.worker(concurrency=2), processes.worker(concurrency=1)]
    processes.beat()
    stop = threading.Event()
    dropped_files: list[bytes] = []

    def junk() -> None:
        queue = folder / "queue"
        n = 0
        while not stop.is_set():
            if queue.is_dir():
                body = JUNK[n % len(JUNK)]
                (queue / f"{n:07d}_junk.media_usage.msg").write_bytes(body)
                dropped_files.append(body)
                n += 1
            stop.wait(0.05)  # pacing, not synchronisation

    thrower = threading.Thread(target=junk)
    thrower.start()
    try:
        wait_for(lambda: _indexed(db) == ENTRIES, timeout=300)
    finally:
        stop.set()
        thrower.join()
    assert all(worker.poll() is None for worker in workers), processes.logs()[-3000:]
    logs = processes.logs()
    assert "Unrecoverable" not in logs and "JSONDecodeError" not in logs
    # No noise a newcomer has to look up: a folder has no host name to supply, and running as
    # root is said in one line of this project's (Celery's own warning is eight).
    assert "No hostname was supplied" not in logs and "superuser privileges" not in logs
    if os.geteuid() == 0:
        assert "media-usage: running as root; run workers and beat as an unprivileged" in logs
    set_aside = sum(1 for body in dropped_files if body != b'{"foreign": true}')
    queue = folder / "queue"
    wait_for(lambda: not [p for p in queue.iterdir() if "junk" in p.name], timeout=60)
    assert len(list((folder / "rejected").iterdir())) == set_aside
    assert "set aside broker file" in processes.logs()
    assert len(dropped_files) > 20
