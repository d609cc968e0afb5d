"""The API of ``media-usage serve`` (docs/api.md): the app and its routers. JSON, every
refusal ``{"error": {"code", "message"}}``, except the console's pages under ``/console/``
(docs/console.md); every input is checked with the CLI's rules before I/O."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio.to_thread
import sqlalchemy as sa
from fastapi import Depends, FastAPI, Request

from media_usage_worker.api import MediaUsage
from media_usage_worker.http import errors, security
from media_usage_worker.http.bodies import MAX_HTTP_IDS
from media_usage_worker.http.cleanup import cleanup_operator_routes, cleanup_read_routes
from media_usage_worker.http.console import console_routes
from media_usage_worker.http.console.static import mount_static
from media_usage_worker.http.head import HeadAsGet
from media_usage_worker.http.operator import collection_routes, work_routes
from media_usage_worker.http.probes import probe_routes
from media_usage_worker.http.reads import read_routes
from media_usage_worker.http.settings import ApiSettings

__all__ = ["MAX_HTTP_IDS", "create_app"]


def create_app(engine: sa.Engine, settings: ApiSettings) -> FastAPI:
    """The API over ``engine`` (disposed when the server stops)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # The routes that read the database run on the event loop's thread pool.
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.threads
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

    def access(*, operator: bool) -> Callable[[Request], None]:
        def dependency(request: Request) -> None:
            security.check(request, settings, operator=operator)

        return dependency

    read = [Depends(access(operator=False))]
    app.include_router(
        probe_routes(engine, metrics_cache_seconds=settings.metrics_cache_seconds, read=read)
    )
    app.include_router(read_routes(MediaUsage(engine), read=read))
    app.include_router(cleanup_read_routes(engine, read=read))
    operate = [Depends(access(operator=True))]
    app.include_router(work_routes(engine, operate=operate))
    app.include_router(collection_routes(engine, operate=operate))
    app.include_router(cleanup_operator_routes(engine, settings, operate=operate))
    app.include_router(console_routes(engine, settings))
    mount_static(app)
    return app
