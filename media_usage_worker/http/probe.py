"""``/readyz`` in bounded time, with at most one database check at a time.

Probes are unauthenticated: forty of them against a slow database must neither take forty of
the pool's connections and the server's threads nor keep a caller waiting longer than a probe
allows. Callers that arrive while a check runs share its answer; a check that outlives the
timeout answers 503 and still finishes in the background, alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool

# A readiness probe answers within this, ready or not (Kubernetes' default probe timeout is 1 s;
# a database slower than this is not ready for this API's readers either).
READY_TIMEOUT_SECONDS = 3.0


class SharedProbe:
    def __init__(self, check: Callable[[], dict[str, Any]], timeout_seconds: float) -> None:
        self._check = check
        self._timeout = timeout_seconds
        self._running: asyncio.Future[dict[str, Any]] | None = None

    async def answer(self) -> dict[str, Any]:
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(run_in_threadpool(self._check))
        try:
            return await asyncio.wait_for(asyncio.shield(self._running), self._timeout)
        except TimeoutError:
            return {
                "ready": False,
                "problem": f"the database did not answer within {self._timeout:g} s",
                "capture": None,
                "sources_not_indexed": [],
            }
        except Exception as exc:  # an unreachable database is an answer, not a 500
            name = type(exc).__name__
            return {
                "ready": False,
                "problem": f"the readiness check failed ({name})",
                "capture": None,
                "sources_not_indexed": [],
            }
