"""What the routes share: page sizes, the coverage as shown, JSON bodies read with a limit."""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import Request
from starlette.requests import ClientDisconnect

from media_usage_worker.api import MAX_IDS, Coverage
from media_usage_worker.domain import validation as check
from media_usage_worker.domain.errors import InvalidArgument
from media_usage_worker.http.errors import ApiError
from media_usage_worker.http.settings import MAX_BODY_BYTES

log = logging.getLogger(__name__)

# Ids one ``GET /v1/usage`` answers (the Python API takes up to ``MAX_IDS``).
MAX_HTTP_IDS = min(100, MAX_IDS)


def page_limit(raw: str | None) -> int | None:
    """A page size from the query string, with the CLI's bounds (1 to 100)."""
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 4):
        raise InvalidArgument(check.OPERATOR_LIMIT_RULE)
    return check.operator_limit(int(raw))


def whole_days(raw: str | None, name: str) -> int | None:
    """A number of days from the query string (``older_than``, a purge preview's ``days``)."""
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 6):
        raise InvalidArgument(f"{name} is a whole number of days.")
    return int(raw)


def coverage_shown(coverage: Coverage) -> dict[str, Any]:
    return {
        "status": coverage.status,
        "complete": coverage.complete,
        "collections": [
            {
                "slug": s.collection_slug,
                "kind": s.kind,
                "status": s.status,
                "rules": s.rules,
                "reason": s.reason,
            }
            for s in coverage.scopes
        ],
    }


async def json_object(
    request: Request, allowed: set[str], *, optional: bool = False
) -> dict[str, Any]:
    """The request body as a JSON object with only ``allowed`` keys, read up to the size limit
    (a longer body is refused before the rest of it is read)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise ApiError(413, "payload_too_large", f"Bodies are at most {MAX_BODY_BYTES} bytes.")
    raw = b""
    try:
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_BODY_BYTES:
                raise ApiError(
                    413, "payload_too_large", f"Bodies are at most {MAX_BODY_BYTES} bytes."
                )
    except ClientDisconnect:
        # Gone before its body arrived (or cut off by the request deadline): one line, and
        # an answer nobody reads, instead of a traceback.
        log.warning("client went away before its request body arrived: %s", request.url.path)
        raise ApiError(400, "client_disconnected", "The request body did not arrive.") from None
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
