"""The operator routes (operator token): work, repair, collection deletion."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Request
from fastapi.params import Depends
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from media_usage_worker.api import MediaUsage
from media_usage_worker.domain import validation as check
from media_usage_worker.domain.content_model import validate_collection_slug
from media_usage_worker.domain.cursor import decode_cursor, deletion_scope, work_scope
from media_usage_worker.domain.errors import InvalidArgument
from media_usage_worker.domain.vocabulary import DeletionOutcome, RetryOutcome
from media_usage_worker.domain.work import OperatorRetryResult
from media_usage_worker.http.bodies import json_object, page_limit
from media_usage_worker.http.errors import ApiError
from media_usage_worker.pipeline.deletion import delete_collection
from media_usage_worker.pipeline.deletion import reopen as reopen_deletion
from media_usage_worker.pipeline.operator_retry import retry_operator_work, retry_refusal
from media_usage_worker.pipeline.registry import request_reindex
from media_usage_worker.tasks.dispatch import reconcile_soon

_RETRY_STATUS = {
    RetryOutcome.LEASE_ACTIVE: (409, "lease_active"),
    RetryOutcome.CONFLICT: (409, "conflict"),
    RetryOutcome.COLLECTION_NOT_FOUND: (404, "collection_not_found"),
    RetryOutcome.CONTENT_NOT_FOUND: (404, "content_not_found"),
}


def work_routes(engine: sa.Engine, *, operate: Sequence[Depends]) -> APIRouter:
    """The work of one collection: its listing and the retry of one entry."""
    router = APIRouter(dependencies=list(operate))

    @router.get("/v1/work")
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
        page = MediaUsage(engine).work(slug, state=state, limit=page_limit(limit), cursor=cursor)
        if page is None:
            raise ApiError(404, "collection_not_found", f"No collection has slug {slug!r}.")
        items = [asdict(item) for item in page.items]
        return {"collection": slug, "items": items, "next_cursor": page.next_cursor}

    @router.post("/v1/work/retry")
    async def work_retry(request: Request) -> JSONResponse:
        """Make an entry's work pending now: ``{"collection" | "collection_id", "content_id",
        "force"}``; an entry with no work, content or index rows needs ``"force": true``."""
        body = await json_object(request, {"collection", "collection_id", "content_id", "force"})
        return await run_in_threadpool(_retry, body)

    def _retry(body: dict[str, Any]) -> JSONResponse:
        if ("collection" in body) == ("collection_id" in body):
            raise InvalidArgument('Give exactly one of "collection" and "collection_id".')
        content_id = check.named_identifier('"content_id"', body.get("content_id"))
        force = body.get("force", False)
        if not isinstance(force, bool):
            raise InvalidArgument('"force" is true or false.')
        if "collection" in body:
            slug = validate_collection_slug(body["collection"])
            found = MediaUsage(engine).collection(slug)
            if found is None:
                raise ApiError(404, "collection_not_found", f"No collection has slug {slug!r}.")
            collection_id = found.id
        else:
            collection_id = check.named_identifier('"collection_id"', body["collection_id"])
        refusal = None
        if not force:
            refusal = retry_refusal(engine, collection_id=collection_id, content_id=content_id)
        if refusal == RetryOutcome.CONTENT_NOT_FOUND:
            raise ApiError(
                404,
                "content_not_found",
                f"No entry {content_id!r}: no work, no content row and nothing indexed for it. "
                'Send "force": true to queue it anyway.',
            )
        if refusal is None:
            result = retry_operator_work(engine, collection_id=collection_id, content_id=content_id)
        else:
            result = OperatorRetryResult(refusal)
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

    return router


def collection_routes(engine: sa.Engine, *, operate: Sequence[Depends]) -> APIRouter:
    """Repair and deletion of whole collections."""
    router = APIRouter(dependencies=list(operate))

    @router.post("/v1/collections/{slug}/repair", status_code=202)
    async def repair(slug: str, request: Request) -> JSONResponse:
        """Re-index the collection as work: coverage leaves ``complete`` now and the
        reconciliation re-indexes every entry; returns at once."""
        await json_object(request, set(), optional=True)
        checked = validate_collection_slug(slug)
        epoch = await run_in_threadpool(request_reindex, engine, checked)
        await run_in_threadpool(reconcile_soon)
        return JSONResponse(
            {
                "collection": checked,
                "status": "stale",
                "change_epoch": epoch,
                "follow": "/v1/status",
            },
            status_code=202,
        )

    @router.delete("/v1/collections/{slug}")
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

    @router.get("/v1/deletions")
    def deletion_list(
        state: str | None = "failed", limit: str | None = None, cursor: str | None = None
    ) -> dict[str, Any]:
        """Collection deletions by state (default ``failed``; ``all``), newest change first."""
        wanted = check.deletion_state(state)
        decode_cursor(cursor, scope=deletion_scope(wanted))
        found = MediaUsage(engine).deletions(wanted, page_limit(limit) or 50, cursor)
        return {"deletions": [t.shown() for t in found.items], "next_cursor": found.next_cursor}

    @router.post("/v1/deletions/retry")
    async def deletion_retry(request: Request) -> JSONResponse:
        """Make a failed, retrying or abandoned deletion due now: ``{"collection": slug}``."""
        body = await json_object(request, {"collection"})
        slug = validate_collection_slug(body.get("collection"))
        reopened = await run_in_threadpool(reopen_deletion, engine, slug)
        if reopened is None:
            raise ApiError(
                404, "deletion_not_found", f"No deletion of {slug!r} to retry (none, or running)."
            )
        return JSONResponse({"collection": slug, "phase": reopened.phase, "state": reopened.state})

    return router
