"""The server-less filesystem broker never dies on a file it cannot read: messages are written
whole (a hidden name, then a rename), a reader waits for a writer that still holds its lock,
and an empty, foreign or torn file is set aside with one line while the consumer goes on."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from pathlib import Path
from queue import Empty

import pytest
from kombu import Connection

from media_usage_worker.tasks.consumer import dropped
from media_usage_worker.tasks.filesystem_transport import GuardedFilesystemTransport

QUEUE = "media_usage"


def _connection(folder: Path) -> Connection:
    queue = folder / "queue"
    queue.mkdir(parents=True, exist_ok=True)
    options = {"data_folder_in": str(queue), "data_folder_out": str(queue),
               "control_folder": str(folder / "control"), "polling_interval": 0.01}  # fmt: skip
    (folder / "control").mkdir(exist_ok=True)
    return Connection(transport=GuardedFilesystemTransport, transport_options=options)


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_message_is_written_whole_under_its_final_name(tmp_path: Path) -> None:
    with _connection(tmp_path) as conn:
        channel = conn.channel()
        channel._put(QUEUE, {"hello": "world"})
        names = _files(tmp_path / "queue")
        assert len(names) == 1 and names[0].endswith(f".{QUEUE}.msg"), names
        assert channel._get(QUEUE) == {"hello": "world"}
        assert _files(tmp_path / "queue") == []
        with pytest.raises(Empty):
            channel._get(QUEUE)


def test_empty_foreign_and_torn_files_are_set_aside_and_the_consumer_goes_on(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "queue"
    before = dropped.snapshot()["total"]
    # A handler and a level of its own: a worker started earlier in this process may have
    # raised the root logger's level (Celery configures logging), which the logger inherits.
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("media_usage.messages")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    try:
        _read_the_junk(tmp_path, folder)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    rejected = _files(tmp_path / "rejected")
    assert rejected == [f"000{n}_{c}.{QUEUE}.msg" for n, c in zip("1234", "abcd", strict=True)]
    assert _files(folder) == [f"0000_young.{QUEUE}.msg"]  # left for a later look
    assert dropped.snapshot()["total"] - before == 5  # four set aside, one not a message
    lines = [r.getMessage() for r in records if "set aside" in r.getMessage()]
    assert len(lines) == 4 and "an empty file" in lines[0], lines


def _read_the_junk(tmp_path: Path, folder: Path) -> None:
    with _connection(tmp_path) as conn:
        channel = conn.channel()
        folder.joinpath(f"0001_a.{QUEUE}.msg").write_bytes(b"")
        os.utime(folder / f"0001_a.{QUEUE}.msg", (0, 0))  # long left empty: set aside
        folder.joinpath(f"0000_young.{QUEUE}.msg").write_bytes(b"")  # its writer may be busy
        folder.joinpath(f"0002_b.{QUEUE}.msg").write_bytes(b"not json at all")
        folder.joinpath(f"0003_c.{QUEUE}.msg").write_bytes(b'{"body": "torn')
        folder.joinpath(f"0004_d.{QUEUE}.msg").write_bytes(b"[1, 2, 3]")
        folder.joinpath(f"0005_e.{QUEUE}.msg").write_bytes(json.dumps({"foreign": 1}).encode())
        channel._put(QUEUE, {"after": "the junk"})
        # A JSON object is read whole; the consumer then checks it is a message at all.
        foreign = channel._get(QUEUE)
        assert foreign == {"foreign": 1}
        conn.transport._deliver(foreign, QUEUE)  # dropped with one line, never raised
        assert channel._get(QUEUE) == {"after": "the junk"}


def test_a_reader_waits_for_a_writer_that_holds_its_lock(tmp_path: Path) -> None:
    """A host on plain kombu writes in place under the final name, holding a lock: the reader
    takes the whole message once the lock is released, never half of it."""
    body = json.dumps({"whole": "x" * 10_000}).encode()
    with _connection(tmp_path) as conn:
        channel = conn.channel()
        target = tmp_path / "queue" / f"0000_torn.{QUEUE}.msg"
        handle = open(target, "wb", buffering=0)  # noqa: SIM115 (held open across the race)
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        handle.write(body[: len(body) // 2])
        got: dict[str, object] = {}
        done = threading.Event()

        def read() -> None:
            got["message"] = channel._get(QUEUE)
            done.set()

        reader = threading.Thread(target=read)
        reader.start()
        assert not done.wait(0.3)  # it waits for the writer, it does not read half a file
        handle.write(body[len(body) // 2 :])
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        handle.close()
        assert done.wait(30)
        reader.join()
        assert got["message"] == {"whole": "x" * 10_000}
