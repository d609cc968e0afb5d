"""The read routes: where a media item is used, counts of many, and the status."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Query
from fastapi.params import Depends

from media_usage_worker.api import MediaUsage
from media_usage_worker.domain import validation as check
from media_usage_worker.domain.errors import InvalidArgument
from media_usage_worker.http.bodies import MAX_HTTP_IDS, coverage_shown, page_limit


def read_routes(index: MediaUsage, *, read: Sequence[Depends]) -> APIRouter:
    router = APIRouter(dependencies=list(read))

    # ``:path``: a media id may hold "/" (a folder-like storage id), raw or as %2F.
    @router.get("/v1/media/{media_id:path}/usage")
    def media_usage(
        media_id: str, limit: str | None = None, cursor: str | None = None
    ) -> dict[str, Any]:
        """Entries using one media item, a keyset page at a time, with the coverage that says
        whether "used nowhere" can be trusted."""
        check.named_identifier("media_id", media_id)
        page = index.usage(media_id, limit=page_limit(limit), cursor=cursor)
        counted = index.usage_counts([media_id])
        count = counted.counts[media_id]
        return {
            "media_id": media_id,
            "in_library": page.in_library,
            "count": count,
            "unused": None if count is None else count == 0,
            "coverage": coverage_shown(counted.coverage),
            "entries": [asdict(e) for e in page.entries],
            "next_cursor": page.next_cursor,
        }

    @router.get("/v1/usage")
    def usage_counts(ids: list[str] = Query(default=[])) -> dict[str, Any]:  # noqa: B008
        """Counts for up to 100 ids (``ids=a,b,c`` or ``ids`` repeated); ``null`` while
        coverage is not complete."""
        wanted = [i for value in ids for i in value.split(",")]
        if not wanted or len(wanted) > MAX_HTTP_IDS:
            raise InvalidArgument(f"ids must name 1 to {MAX_HTTP_IDS} media ids.")
        counted = index.usage_counts(wanted)
        return {"coverage": coverage_shown(counted.coverage), "counts": counted.counts}

    @router.get("/v1/status")
    def status() -> dict[str, Any]:
        """Capture, coverage, work by state and the oldest due item, per collection."""
        overview = index.status()
        return {
            "capture": overview.capture,
            "coverage": overview.coverage,
            "collections": [asdict(c) for c in overview.collections],
            "deletions": overview.deletions,
            "sources": [asdict(c) for c in overview.sources],
            "cleanup": overview.cleanup,
            "pace": None if overview.pace is None else asdict(overview.pace),
        }

    return router
