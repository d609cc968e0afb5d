"""``media-usage serve`` as a real process on a loopback port, and a small HTTP client."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.processes import ROOT, wait_for
from tests.servers import free_port

TOKEN = "test-token-0123456789abcdef"


@dataclass(frozen=True)
class Reply:
    """A response; header names are lower-case."""

    status: int
    headers: dict[str, str]
    text: str

    @property
    def json(self) -> Any:
        return json.loads(self.text)


class Api:
    def __init__(self, base: str, log: Path) -> None:
        self.base = base
        self.log = log

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        token: str | None = TOKEN,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        sent = dict(headers or {})
        if token is not None:
            sent.setdefault("Authorization", f"Bearer {token}")
        req = urllib.request.Request(self.base + path, data=body, method=method, headers=sent)
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                return Reply(response.status, _lower(response.headers), response.read().decode())
        except urllib.error.HTTPError as error:
            return Reply(error.code, _lower(error.headers), error.read().decode())

    def get(self, path: str, **kwargs: Any) -> Reply:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, payload: Any = None, **kwargs: Any) -> Reply:
        body = None if payload is None else json.dumps(payload).encode()
        return self.request("POST", path, body=body, **kwargs)


def _lower(headers: Any) -> dict[str, str]:
    return {key.lower(): value for key, value in headers.items()}


@contextlib.contextmanager
def serving(database_url: str, tmp: Path, workers: int = 1, **env: str) -> Iterator[Api]:
    """The server on a free loopback port, with ``MEDIA_USAGE_API_TOKEN=TOKEN`` unless ``env``
    says otherwise (an empty value unsets it), in ``workers`` processes (one unless a test is
    about several: each costs an interpreter's start); stopped on leaving."""
    port = free_port()
    environment = {**os.environ, "MEDIA_USAGE_API_TOKEN": TOKEN, **env}
    environment = {k: v for k, v in environment.items() if v != ""}
    log = tmp / f"api-{port}.log"
    with open(log, "wb") as output:
        proc = subprocess.Popen(
            [sys.executable, "-m", "media_usage_worker", "serve", "--port", str(port),
             "--database-url", database_url, "--workers", str(workers)],
            cwd=ROOT, env=environment, stdout=output, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    api = Api(f"http://127.0.0.1:{port}", log)

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited: {log.read_text()}")
        with contextlib.suppress(OSError):
            return api.get("/healthz", token=None).status == 200
        return False

    try:
        wait_for(up, timeout=60, interval=0.1)
        yield api
        assert proc.poll() is None, log.read_text()  # no request stopped the server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
