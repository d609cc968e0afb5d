"""The routes of ``media-usage serve`` (docs/api.md). JSON only; every refusal is
``{"error": {"code", "message"}}``; every input is checked with the CLI's rules before I/O."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict
from typing import Any

import sqlalchemy as sa
from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.concurrency import run_in_threadpool

from media_usage_worker.api import MAX_IDS, Coverage, MediaUsage
from media_usage_worker.domain import validation as check
from media_usage_worker.domain.content_model import validate_collection_slug
from media_usage_worker.domain.cursor import decode_cursor, deletion_scope, work_scope
from media_usage_worker.domain.errors import InvalidArgument
from media_usage_worker.domain.vocabulary import DeletionOutcome, RetryOutcome
from media_usage_worker.http import errors, security
from media_usage_worker.http.errors import ApiError
from media_usage_worker.http.head import HeadAsGet
from media_usage_worker.http.metrics import IndexCollector
from media_usage_worker.http.probe import READY_TIMEOUT_SECONDS, SharedProbe
from media_usage_worker.http.settings import MAX_BODY_BYTES, ApiSettings
from media_usage_worker.pipeline.deletion import delete_collection
from media_usage_worker.repository import collections, work_operator
from media_usage_worker.repository.activation import is_activation_active
from media_usage_worker.repository.collections import request_reindex
from media_usage_worker.repository.db import read_transaction
from media_usage_worker.repository.deletions import page as deletion_page
from media_usage_worker.repository.deletions import reopen as reopen_deletion
from media_usage_worker.repository.migrate import UNREADABLE, schema_problem

log = logging.getLogger(__name__)
# Ids one ``GET /v1/usage`` answers (the Python API takes up to ``MAX_IDS``).
MAX_HTTP_IDS = min(100, MAX_IDS)
_RETRY_STATUS = {
    RetryOutcome.LEASE_ACTIVE: (409, "lease_active"),
    RetryOutcome.CONFLICT: (409, "conflict"),
    RetryOutcome.COLLECTION_NOT_FOUND: (404, "collection_not_found"),
    RetryOutcome.CONTENT_NOT_FOUND: (404, "content_not_found"),
}


def create_app(engine: sa.Engine, settings: ApiSettings) -> FastAPI:
    """The API over ``engine`` (disposed when the server stops)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        engine.dispose()

    app = FastAPI(
        title="media-usage-worker",
        summary="Where is each media item used, and can 'used nowhere' be trusted?",
        version="1",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    errors.install(app)
    app.add_middleware(HeadAsGet)
    index = MediaUsage(engine)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(IndexCollector(engine, settings.metrics_cache_seconds))

    def access(*, operator: bool) -> Callable[[Request], None]:
        def dependency(request: Request) -> None:
            security.check(request, settings, operator=operator)

        return dependency

    read = [Depends(access(operator=False))]
    operate = [Depends(access(operator=True))]

    # ``async``: answered on the event loop, never behind requests waiting for a thread or the
    # database, so a slow database cannot make a liveness probe restart the API.
    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process is up (no database access)."""
        return {"status": "ok"}

    def readiness() -> dict[str, Any]:
        problem = schema_problem(engine)
        if problem is not None and problem.startswith(UNREADABLE):
            # The driver's text names the database's host and port: the log gets it, an
            # unauthenticated caller only what to look at.
            log.warning("not ready: %s", problem)
            problem = f"{UNREADABLE} (the API server's log has the reason)"
        capture = None
        if problem is None:
            with read_transaction(engine) as conn:
                capture = "active" if is_activation_active(conn) else "inactive"
        return {"ready": problem is None, "problem": problem, "capture": capture}

    probe = SharedProbe(readiness, READY_TIMEOUT_SECONDS)

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        """The database is reachable and migrated; the capture state is reported. Answers 503
        within ``READY_TIMEOUT_SECONDS`` however slow the database is."""
        body = await probe.answer()
        return JSONResponse(body, status_code=200 if body["ready"] else 503)

    # ``:path``: a media id may hold "/" (a folder-like storage id), raw or as %2F.
    @app.get("/v1/media/{media_id:path}/usage", dependencies=read)
    def media_usage(
        media_id: str, limit: str | None = None, cursor: str | None = None
    ) -> dict[str, Any]:
        """Entries using one media item, a keyset page at a time, with the coverage that says
        whether "used nowhere" can be trusted."""
        check.named_identifier("media_id", media_id)
        page = index.usage(media_id, limit=_limit(limit), cursor=cursor)
        counted = index.usage_counts([media_id])
        count = counted.counts[media_id]
        return {
            "media_id": media_id,
            "in_library": page.in_library,
            "count": count,
            "unused": None if count is None else count == 0,
            "coverage": _coverage(counted.coverage),
            "entries": [asdict(e) for e in page.entries],
            "next_cursor": page.next_cursor,
        }

    @app.get("/v1/usage", dependencies=read)
    def usage_counts(ids: list[str] = Query(default=[])) -> dict[str, Any]:  # noqa: B008
        """Counts for up to 100 ids (``ids=a,b,c`` or ``ids`` repeated); ``null`` while
        coverage is not complete."""
        wanted = [i for value in ids for i in value.split(",")]
        if not wanted or len(wanted) > MAX_HTTP_IDS:
            raise InvalidArgument(f"ids must name 1 to {MAX_HTTP_IDS} media ids.")
        counted = index.usage_counts(wanted)
        return {"coverage": _coverage(counted.coverage), "counts": counted.counts}

    @app.get("/v1/status", dependencies=read)
    def status() -> dict[str, Any]:
        """Capture, coverage, work by state and the oldest due item, per collection."""
        overview = index.status()
        return {
            "capture": overview.capture,
            "coverage": overview.coverage,
            "collections": [asdict(c) for c in overview.collections],
            "deletions": overview.deletions,
        }

    @app.get("/metrics", dependencies=read)
    def metrics() -> Response:
        """Prometheus text format, read from the database (cached a few seconds)."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/work", dependencies=operate)
    def work_list(
        collection: str | None = None,
        state: str | None = None,
        limit: str | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """A collection's work, newest first (lease tokens are never shown)."""
        if collection is None:
            raise InvalidArgument("collection is required: the slug of the collection to list.")
        slug = validate_collection_slug(collection)
        decode_cursor(cursor, scope=work_scope(slug, check.work_state(state)))
        page = work_operator.find_operator_page(
            engine, collection_slug=slug, state=state, limit=_limit(limit), cursor=cursor
        )
        if page is None:
            raise ApiError(404, "collection_not_found", f"No collection has slug {slug!r}.")
        items = [asdict(item) for item in page.items]
        return {"collection": slug, "items": items, "next_cursor": page.next_cursor}

    @app.post("/v1/work/retry", dependencies=operate)
    async def work_retry(request: Request) -> JSONResponse:
        """Make an entry's work pending now: ``{"collection" | "collection_id", "content_id"}``."""
        body = await _json_object(request, {"collection", "collection_id", "content_id"})
        return await run_in_threadpool(_retry, body)

    def _retry(body: dict[str, Any]) -> JSONResponse:
        if ("collection" in body) == ("collection_id" in body):
            raise InvalidArgument('Give exactly one of "collection" and "collection_id".')
        content_id = check.named_identifier('"content_id"', body.get("content_id"))
        if "collection" in body:
            slug = validate_collection_slug(body["collection"])
            found = collections.find_collection(engine, slug)
            if found is None:
                raise ApiError(404, "collection_not_found", f"No collection has slug {slug!r}.")
            collection_id = found.id
        else:
            collection_id = check.named_identifier('"collection_id"', body["collection_id"])
        result = work_operator.retry_operator_work(
            engine, collection_id=collection_id, content_id=content_id
        )
        if result.outcome != RetryOutcome.PENDING:
            status_code, code = _RETRY_STATUS[result.outcome]
            message = f"Not retried: {result.outcome}"
            if result.lease_expires_at:
                message += f" (a worker holds the item until {result.lease_expires_at})"
            raise ApiError(status_code, code, message + ".")
        return JSONResponse(
            {
                "outcome": result.outcome,
                "changed": result.changed,
                "work": asdict(result.work) if result.work else None,
            }
        )

    @app.post("/v1/collections/{slug}/repair", dependencies=operate, status_code=202)
    async def repair(slug: str, request: Request) -> JSONResponse:
        """Re-index the collection as work: coverage leaves ``complete`` now and the
        reconciliation re-indexes every entry; returns at once."""
        await _json_object(request, set(), optional=True)
        checked = validate_collection_slug(slug)
        epoch = await run_in_threadpool(request_reindex, engine, checked)
        return JSONResponse(
            {
                "collection": checked,
                "status": "stale",
                "change_epoch": epoch,
                "follow": "/v1/status",
            },
            status_code=202,
        )

    @app.delete("/v1/collections/{slug}", dependencies=operate)
    async def delete(slug: str, force: str | None = None) -> JSONResponse:
        """Delete a collection: 202 once its content is gone (the rest follows as work);
        409 ``has_content`` (pass ``force=true``) or ``in_progress``."""
        checked = validate_collection_slug(slug)
        if force not in (None, "true", "false", "1", "0"):
            raise InvalidArgument("force must be true or false.")
        forced = force in ("true", "1")
        result = await run_in_threadpool(delete_collection, engine, checked, force=forced)
        body = {"collection": checked, "outcome": result.outcome, "phase": result.phase,
                "state": result.state, "follow": "/v1/status"}  # fmt: skip
        if result.outcome == DeletionOutcome.DELETED:
            return JSONResponse(body, status_code=202)
        message = {
            DeletionOutcome.HAS_CONTENT: f"Collection {checked!r} still has entries; nothing "
            "was changed (force=true deletes them).",
            DeletionOutcome.ALREADY_DELETED: f"Collection {checked!r} was already deleted; "
            f"its clean-up goes on by itself (phase {result.phase}).",
        }.get(
            result.outcome,
            f"Another caller holds the deletion of {checked!r} (phase {result.phase}).",
        )
        raise ApiError(409, str(result.outcome), message)

    @app.get("/v1/deletions", dependencies=operate)
    def deletion_list(
        state: str | None = "failed", limit: str | None = None, cursor: str | None = None
    ) -> dict[str, Any]:
        """Collection deletions by state (default ``failed``; ``all``), newest change first."""
        wanted = check.deletion_state(state)
        decode_cursor(cursor, scope=deletion_scope(wanted))
        found = deletion_page(engine, wanted, _limit(limit) or 50, cursor)
        return {"deletions": [t.shown() for t in found.items], "next_cursor": found.next_cursor}

    @app.post("/v1/deletions/retry", dependencies=operate)
    async def deletion_retry(request: Request) -> JSONResponse:
        """Make a failed, retrying or abandoned deletion due now: ``{"collection": slug}``."""
        body = await _json_object(request, {"collection"})
        slug = validate_collection_slug(body.get("collection"))
        reopened = await run_in_threadpool(reopen_deletion, engine, slug)
        if reopened is None:
            raise ApiError(
                404, "deletion_not_found", f"No deletion of {slug!r} to retry (none, or running)."
            )
        return JSONResponse({"collection": slug, "phase": reopened.phase, "state": reopened.state})

    return app


def _limit(raw: str | None) -> int | None:
    """A page size from the query string, with the CLI's bounds (1 to 100)."""
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 4):
        raise InvalidArgument(check.OPERATOR_LIMIT_RULE)
    return check.operator_limit(int(raw))


def _coverage(coverage: Coverage) -> dict[str, Any]:
    return {
        "status": coverage.status,
        "complete": coverage.complete,
        "collections": [
            {"slug": s.collection_slug, "status": s.status, "rules": s.rules}
            for s in coverage.scopes
        ],
    }


async def _json_object(
    request: Request, allowed: set[str], *, optional: bool = False
) -> dict[str, Any]:
    """The request body as a JSON object with only ``allowed`` keys, read up to the size limit
    (a longer body is refused before the rest of it is read)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise ApiError(413, "payload_too_large", f"Bodies are at most {MAX_BODY_BYTES} bytes.")
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise ApiError(413, "payload_too_large", f"Bodies are at most {MAX_BODY_BYTES} bytes.")
    if optional and not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise InvalidArgument("The body must be a JSON object.") from None
    if not isinstance(body, dict):
        raise InvalidArgument("The body must be a JSON object.")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise InvalidArgument(f"Unknown field {unknown[0][:40]!r} in the body.")
    return body
