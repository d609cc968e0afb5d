"""The probes and the metrics: ``/healthz``, ``/readyz`` and ``/metrics``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Response
from fastapi.params import Depends
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from media_usage_worker.http.metrics import IndexCollector
from media_usage_worker.http.probe import READY_TIMEOUT_SECONDS, SharedProbe
from media_usage_worker.pipeline.database import UNREADABLE, readiness

log = logging.getLogger(__name__)


def probe_routes(
    engine: sa.Engine, *, metrics_cache_seconds: int, read: Sequence[Depends]
) -> APIRouter:
    router = APIRouter()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(IndexCollector(engine, metrics_cache_seconds))

    # ``async``: answered on the event loop, never behind requests waiting for a thread or the
    # database, so a slow database cannot make a liveness probe restart the API.
    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process is up (no database access)."""
        return {"status": "ok"}

    def ready() -> dict[str, Any]:
        found = readiness(engine)
        problem = found.problem
        if problem is not None and problem.startswith(UNREADABLE):
            # The driver's text names the database's host and port: the log gets it, an
            # unauthenticated caller only what to look at.
            log.warning("not ready: %s", problem)
            problem = f"{UNREADABLE} (the API server's log has the reason)"
        active = found.capture_active
        return {
            "ready": found.ready,
            "problem": problem,
            "capture": None if active is None else ("active" if active else "inactive"),
            # Ready to answer still (every answer says coverage is not complete), but an
            # operator must act: a built-in source whose table is not as it reads is not indexed.
            "sources_not_indexed": [
                {"source": label, "reason": why} for label, why in found.sources_not_indexed
            ],
        }

    probe = SharedProbe(ready, READY_TIMEOUT_SECONDS)

    @router.get("/readyz")
    async def readyz() -> JSONResponse:
        """The database is reachable and migrated; the capture state is reported. Answers 503
        within ``READY_TIMEOUT_SECONDS`` however slow the database is."""
        body = await probe.answer()
        return JSONResponse(body, status_code=200 if body["ready"] else 503)

    # ``:path``: a media id may hold "/" (a folder-like storage id), raw or as %2F.
    @router.get("/metrics", dependencies=list(read))
    def metrics() -> Response:
        """Prometheus text format, read from the database (cached a few seconds)."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return router
