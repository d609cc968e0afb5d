"""Throwaway PostgreSQL and Redis servers for the test suite (and the benchmarks).

Process lifecycle is mirakuru's: it starts the server in its own session, waits until the port
answers and stops the whole process group. What is left here is only what mirakuru cannot know:
where the binaries are, and that PostgreSQL refuses to run as root (so as root the data
directory is handed to the ``postgres`` user and the server runs as that user).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mirakuru import TCPExecutor


class ServerUnavailable(RuntimeError):
    """The server's binaries are not on this machine."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _postgres_bindir() -> Path:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        candidates.insert(0, out.stdout.strip())
    for candidate in candidates:
        if candidate and (Path(candidate) / "initdb").exists():
            return Path(candidate)
    raise ServerUnavailable("no PostgreSQL binaries (initdb) found in /usr/lib/postgresql/*/bin")


@dataclass
class PostgresServer:
    """A PostgreSQL cluster in a temporary directory, trust auth, loopback only."""

    port: int = field(default_factory=free_port)
    user: str = "postgres"
    # Other addresses to listen on and networks to trust (the partition test's veth links).
    listen: str = "127.0.0.1"
    trusted_networks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.bindir = _postgres_bindir()
        self.root = Path(tempfile.mkdtemp(prefix="media-usage-pg-"))
        self.datadir = self.root / "data"
        self.run_as = "postgres" if os.geteuid() == 0 else None
        self.executor: TCPExecutor | None = None

    @property
    def admin_url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def _popen_kwargs(self) -> dict:
        return {"user": self.run_as} if self.run_as else {}

    def _log(self):
        """Server log file in the cluster directory (kept out of pytest's captured output)."""
        return open(self.root / "postgres.log", "ab")

    def start(self) -> PostgresServer:
        if self.run_as:
            entry = pwd.getpwnam(self.run_as)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        subprocess.run(
            [str(self.bindir / "initdb"), "-D", str(self.datadir), "-U", self.user,
             "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"],
            check=True, capture_output=True, **self._popen_kwargs(),
        )  # fmt: skip
        with open(self.datadir / "pg_hba.conf", "a") as hba:
            for network in self.trusted_networks:
                hba.write(f"host all all {network} trust\n")
        command = [
            str(self.bindir / "postgres"), "-D", str(self.datadir), "-p", str(self.port),
            "-c", f"listen_addresses={self.listen}", "-c", f"unix_socket_directories={self.root}",
            "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
            "-c", "max_connections=300", "-c", "shared_buffers=256MB",
        ]  # fmt: skip
        self.executor = TCPExecutor(
            command, host="127.0.0.1", port=self.port, timeout=60,
            popen_kwargs=self._popen_kwargs(), stdout=subprocess.DEVNULL, stderr=self._log(),
        )  # fmt: skip
        self.executor.start()
        self._wait_until_accepting()
        return self

    def _wait_until_accepting(self, timeout: float = 60.0) -> None:
        """The port opens before recovery ends ("the database system is starting up"): wait
        until a session can start, not just until the port answers."""
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.admin_url, connect_timeout=5).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # polling a server process that is still starting

    def restart(self) -> None:
        """Fast shutdown (SIGINT, like ``pg_ctl restart -m fast``) and start again."""
        assert self.executor is not None
        self.executor.stop(stop_signal=2)
        self.executor.start()
        self._wait_until_accepting()

    def stop(self) -> None:
        if self.executor is not None:
            self.executor.stop(stop_signal=2)
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class RedisServer:
    """A redis-server with no persistence on a free loopback port."""

    port: int = field(default_factory=free_port)
    bind: str = "127.0.0.1"

    def __post_init__(self) -> None:
        binary = shutil.which("redis-server")
        if not binary:
            raise ServerUnavailable("redis-server is not installed (apt-get install redis-server)")
        self.binary = binary
        self.executor: TCPExecutor | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        command = [
            self.binary, "--port", str(self.port), "--bind", self.bind, "--save", "",
            "--appendonly", "no", "--protected-mode", "no",
        ]  # fmt: skip
        self.executor = TCPExecutor(
            command, host="127.0.0.1", port=self.port, timeout=30, stdout=subprocess.DEVNULL
        )
        self.executor.start()
        return self

    def restart(self) -> None:
        assert self.executor is not None
        self.executor.stop()
        self.executor.start()

    def stop(self) -> None:
        if self.executor is not None:
            self.executor.stop()


def unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI requires this server: {reason}", pytrace=False)
    pytest.skip(reason)


def start_or_skip(server: Callable[[], Any], name: str) -> Any:
    """Start a throwaway server; skip (fail under CI) where its binaries are missing."""
    try:
        return server().start()
    except (ServerUnavailable, OSError) as exc:
        unavailable(f"{name} unavailable: {exc}")
