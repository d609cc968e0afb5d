"""Real Celery worker and beat processes for the slow tier, and polling with a deadline."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.2) -> None:
    """Poll ``predicate`` until it holds; fail with a clear message at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


def work_rows(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM _emdash_media_usage_work")).scalar_one()


class Processes:
    """``celery -A tasks worker|beat`` subprocesses, killed at teardown; started in ``cwd``
    (this repository, or a host project's directory holding its own ``tasks.py``)."""

    def __init__(self, env: dict[str, str], tmp: Path, cwd: Path = ROOT) -> None:
        self.env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        self.tmp = tmp
        self.cwd = cwd
        self.running: list[subprocess.Popen] = []

    def _start(self, name: str, args: list[str], prefix: Sequence[str] = ()) -> subprocess.Popen:
        log = open(self.tmp / f"{name}-{len(self.running)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "celery", "-A", "tasks", *args],
            cwd=self.cwd,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.running.append(proc)
        return proc

    def worker(
        self, concurrency: int = 2, prefix: Sequence[str] = (), queues: str = "media_usage"
    ) -> subprocess.Popen:
        """A worker; ``prefix`` runs it through a wrapper command (for example ``setpriv``)."""
        return self._start(
            "worker",
            [
                "worker",
                "-Q",
                queues,
                "-c",
                str(concurrency),
                "-l",
                "info",
                "-E",
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
            ],
            prefix,
        )

    def documented_worker(self) -> subprocess.Popen:
        """A worker started exactly as docs/operations.md says (default log level)."""
        return self._start("worker", ["worker", "-Q", "media_usage", "-E"])

    def next_log(self, name: str) -> Path:
        """The log file the next process started as ``name`` writes."""
        return self.tmp / f"{name}-{len(self.running)}.log"

    def beat(self) -> subprocess.Popen:
        schedule = self.tmp / f"beat-{len(self.running)}"
        return self._start("beat", ["beat", "-s", str(schedule), "-l", "info"])

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.tmp.glob("*.log")))

    def kill(self, proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        proc.wait(timeout=30)

    def stop_all(self) -> None:
        for proc in self.running:
            if proc.poll() is None:
                self.kill(proc)


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str

    @property
    def errors(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("Error")]


def cli(*args: str, url: str | None = None, cwd: Path | None = None) -> Ran:
    env = {k: v for k, v in os.environ.items() if k != "MEDIA_USAGE_DATABASE_URL"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    command = [sys.executable, "-m", "media_usage_worker", *args]
    if url is not None:
        command += ["--database-url", url]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, cwd=cwd)
    assert "Traceback" not in done.stderr, done.stderr
    return Ran(done.returncode, done.stdout, done.stderr)
