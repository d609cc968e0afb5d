"""The clean-up routes: what can go (read token), retire and restore (operator token), and
references to no library item (read token). docs/operations.md, "Cleaning up unused media"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Request
from fastapi.params import Depends
from starlette.concurrency import run_in_threadpool

from media_usage_worker.api import MediaUsage
from media_usage_worker.domain.cleanup import UnusedFilter
from media_usage_worker.domain.errors import InvalidArgument
from media_usage_worker.http.bodies import json_object, page_limit, whole_days
from media_usage_worker.http.errors import ApiError
from media_usage_worker.http.settings import ApiSettings
from media_usage_worker.pipeline import cleanup
from media_usage_worker.tasks.dispatch import send_purged_files

ACTOR = "http"


def _flag(raw: str | None) -> bool:
    if raw in (None, "", "false", "0"):
        return False
    if raw in ("true", "1"):
        return True
    raise InvalidArgument("include_trashed_only is true or false.")


def cleanup_read_routes(engine: sa.Engine, *, read: Sequence[Depends]) -> APIRouter:
    router = APIRouter(dependencies=list(read))

    @router.get("/v1/unused")
    def unused(
        limit: str | None = None,
        cursor: str | None = None,
        older_than: str | None = None,
        mime: str | None = None,
        include_trashed_only: str | None = None,
    ) -> dict[str, Any]:
        """Library items no source uses, by id, with the selection's totals; 409
        ``not_known_yet`` (with the coverage) while coverage is not complete."""
        chosen = UnusedFilter(
            whole_days(older_than, "older_than"), mime, _flag(include_trashed_only)
        )
        page = cleanup.unused(engine, chosen, limit=page_limit(limit), cursor=cursor)
        if not page.known:
            raise ApiError(
                409, "not_known_yet", f"Coverage is {page.coverage}: what is unused is not known."
            )
        return {
            "items": [asdict(item) for item in page.items],
            "next_cursor": page.next_cursor,
            "total_count": page.total_count,
            "total_bytes": page.total_bytes,
        }

    @router.get("/v1/dangling")
    def dangling_references(limit: str | None = None) -> dict[str, Any]:
        """References to a media id no library item has, with where each one is."""
        found, total = MediaUsage(engine).dangling(page_limit(limit) or 100)
        return {"total": total, "references": [reference.shown() for reference in found]}

    return router


def cleanup_operator_routes(
    engine: sa.Engine, settings: ApiSettings, *, operate: Sequence[Depends]
) -> APIRouter:
    router = APIRouter(dependencies=list(operate))

    @router.post("/v1/media/retire")
    async def retire(request: Request) -> dict[str, Any]:
        """``{"ids": [...]}``, or ``{"all_unused": true, "older_than", "mime", "dry_run"}``:
        retire behind the write fence; each refused id with its reason."""
        body = await json_object(request, {"ids", "all_unused", "older_than", "mime", "dry_run"})
        return await run_in_threadpool(_retire, body)

    def _retire(body: dict[str, Any]) -> dict[str, Any]:
        every = body.get("all_unused", False)
        if not isinstance(every, bool):
            raise InvalidArgument('"all_unused" is true or false.')
        if ("ids" in body) == every:
            raise InvalidArgument(
                'Give "ids" or "all_unused": true, not both.'
                if every
                else 'Give "ids" (a list of media ids) or "all_unused": true.'
            )
        dry_run = body.get("dry_run", False)
        if not isinstance(dry_run, bool):
            raise InvalidArgument('"dry_run" is true or false.')
        if every:
            chosen = UnusedFilter(body.get("older_than"), body.get("mime"))
            result = cleanup.retire_all_unused(engine, chosen, actor=ACTOR, dry_run=dry_run)
        else:
            if set(body) - {"ids", "dry_run"}:
                raise InvalidArgument('"older_than" and "mime" go with "all_unused".')
            result = cleanup.retire(engine, body["ids"], actor=ACTOR, dry_run=dry_run)
        verb = "would_retire" if dry_run else "retired"
        return {verb: result.retired, "refused": dict(result.refused)}

    @router.post("/v1/media/restore")
    async def restore(request: Request) -> dict[str, Any]:
        """``{"ids": [...]}``: put retired items back into the library as they were."""
        body = await json_object(request, {"ids"})
        if "ids" not in body:
            raise InvalidArgument('"ids" is required.')
        result = await run_in_threadpool(cleanup.restore, engine, body["ids"], actor=ACTOR)
        return {"restored": result.restored, "refused": dict(result.refused)}

    @router.post("/v1/media/purge")
    async def purge(request: Request) -> dict[str, Any]:
        """``{"retired_before": DAYS, "dry_run": false}``: remove retired items for good and
        hand their files to the configured target; 409 ``nowhere_to_purge`` without one."""
        body = await json_object(request, {"retired_before", "dry_run"})
        return await run_in_threadpool(_purge, body)

    def _purge(body: dict[str, Any]) -> dict[str, Any]:
        days, dry_run = body.get("retired_before"), body.get("dry_run", False)
        if not isinstance(days, int) or isinstance(days, bool):
            raise InvalidArgument('"retired_before" is a whole number of days.')
        if not isinstance(dry_run, bool):
            raise InvalidArgument('"dry_run" is true or false.')
        target = settings.purge  # neither set: NowhereToPurge, 409 (http.errors)

        def send(task: str, keys: list[str]) -> None:
            send_purged_files(task, keys, settings.purge_queue)

        report = cleanup.purge(engine, days, actor=ACTOR, target=target, send=send, dry_run=dry_run)
        return report.shown()

    return router
