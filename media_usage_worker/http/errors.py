"""One JSON shape for every refusal: ``{"error": {"code": ..., "message": ...}}``.

Bad input is 400 and never reaches the database; a server-side failure is one line of
``message`` and a log entry, never a stack trace in the response.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException

from media_usage_worker.domain.errors import (
    CaptureInactive,
    CollectionNotFound,
    InvalidArgument,
    MediaUsageError,
    NowhereToPurge,
)

log = logging.getLogger(__name__)


class ApiError(Exception):
    """A refusal with its HTTP status, a stable machine code and one line for people."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    body = {"error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=status, headers=headers)


# Starlette's own refusals (no route, wrong method), in this API's shape.
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}


def install(app: FastAPI) -> None:
    """Register the handlers that turn every exception into the JSON shape."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        first: dict[str, Any] = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return error_response(400, "invalid_argument", f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(NowhereToPurge)
    async def nowhere(_: Request, exc: NowhereToPurge) -> JSONResponse:
        return error_response(409, "nowhere_to_purge", str(exc))

    @app.exception_handler(InvalidArgument)
    async def invalid(_: Request, exc: InvalidArgument) -> JSONResponse:
        return error_response(400, "invalid_argument", str(exc))

    @app.exception_handler(CollectionNotFound)
    async def no_collection(_: Request, exc: CollectionNotFound) -> JSONResponse:
        return error_response(404, "collection_not_found", str(exc))

    @app.exception_handler(CaptureInactive)
    async def inactive(_: Request, exc: CaptureInactive) -> JSONResponse:
        return error_response(409, "capture_inactive", str(exc))

    @app.exception_handler(MediaUsageError)
    async def refused(_: Request, exc: MediaUsageError) -> JSONResponse:
        return error_response(409, "conflict", str(exc))

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        # Starlette's headers (``Allow`` on a 405) are part of the answer; every GET route
        # answers HEAD as well, so a 405's Allow says so.
        headers = dict(exc.headers) if exc.headers else None
        if headers and "GET" in headers.get("Allow", "").split(", "):
            allowed = headers["Allow"].split(", ")
            headers["Allow"] = ", ".join(sorted({*allowed, "HEAD"}))
        return error_response(exc.status_code, code, str(exc.detail), headers)

    @app.exception_handler(OperationalError)
    async def unavailable(_: Request, exc: OperationalError) -> JSONResponse:
        log.warning("database unavailable: %s", str(exc.orig or exc).splitlines()[0])
        return error_response(503, "unavailable", "The database cannot be reached; try again.")

    @app.exception_handler(PoolTimeout)
    async def busy(_: Request, exc: PoolTimeout) -> JSONResponse:
        # Every pooled connection is busy (a slow database): try again, not a server bug.
        log.warning("no database connection free: %s", str(exc).splitlines()[0])
        return error_response(503, "unavailable", "The database is busy; try again.")

    @app.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return error_response(500, "internal", "Unexpected server error; see the server's log.")
