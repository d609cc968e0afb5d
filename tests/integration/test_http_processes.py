"""``serve --workers N``: several server processes share the port the command bound, each
with its own engine and the same settings; one that dies is replaced, and SIGTERM to the
command stops them all (both dialects)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import psutil
from click.testing import CliRunner

from media_usage_worker.cli import main
from tests.http_server import TOKEN, Api
from tests.processes import ROOT, wait_for
from tests.servers import free_port

STARTED = re.compile(r"Started server process \[(\d+)\]")


def _started(log: Path) -> list[int]:
    return [int(pid) for pid in STARTED.findall(log.read_text())]


def _answers(api: Api) -> bool:
    try:
        return api.get("/healthz", token=None).status == 200
    except OSError:
        return False


def test_several_processes_serve_one_port_replace_the_dead_and_stop_together(
    migrated_url: str, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    env = {
        **os.environ,
        "MEDIA_USAGE_API_TOKEN": TOKEN,
        "MEDIA_USAGE_API_HEADER_TIMEOUT_SECONDS": "1",
    }
    with open(log, "wb") as output:
        command = subprocess.Popen(
            [sys.executable, "-m", "media_usage_worker", "serve", "--port", str(port),
             "--database-url", migrated_url, "--workers", "2"],
            cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    api = Api(f"http://127.0.0.1:{port}", log)
    try:
        wait_for(lambda: len(_started(log)) == 2 and _answers(api), timeout=60, interval=0.1)
        assert "(2 processes)" in log.read_text()
        first, second = _started(log)
        children = {p.pid for p in psutil.Process(command.pid).children()}
        assert {first, second} <= children
        # Each answers with the settings the command checked: the token and the deadline.
        assert {api.get("/v1/status").status for _ in range(20)} == {200}
        assert api.get("/v1/status", token="wrong-token-0123456789").status == 401
        where = urlsplit(api.base)
        slow = socket.create_connection((where.hostname, where.port), timeout=30)
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # never finished
        assert slow.recv(1024) == b""  # cut off by the worker's own deadline
        slow.close()

        os.kill(first, signal.SIGKILL)
        wait_for(lambda: len(_started(log)) == 3, timeout=60, interval=0.1)
        replacement = _started(log)[2]
        wait_for(lambda: _answers(api), timeout=30, interval=0.1)
        assert {api.get("/v1/status").status for _ in range(20)} == {200}

        command.send_signal(signal.SIGTERM)
        assert command.wait(timeout=60) == 0
        for pid in (second, replacement):
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
    finally:
        if command.poll() is None:
            command.kill()
            command.wait(timeout=30)


def test_workers_is_a_number_from_1_to_32() -> None:
    for bad in ("0", "33", "two"):
        done = CliRunner().invoke(main, ["serve", "--workers", bad])
        assert done.exit_code == 2 and "--workers" in done.output, done.output


def test_the_default_is_one_process_per_usable_core() -> None:
    from media_usage_worker.cli.serve import MAX_WORKERS, default_workers

    assert default_workers() == min(len(os.sched_getaffinity(0)), MAX_WORKERS)
