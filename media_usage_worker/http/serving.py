"""What each process of ``serve --workers N`` runs.

uvicorn starts its worker processes afresh (a spawned interpreter, not a fork), so it hands them
import paths, not objects: this module's app factory and protocol rebuild the server from the
environment the ``serve`` command checked before it started them. The database URL travels in
``MEDIA_USAGE_DATABASE_URL``, which the command sets for its children.
"""

from __future__ import annotations

import asyncio
import functools
import os

from fastapi import FastAPI

from media_usage_worker.http.app import create_app
from media_usage_worker.http.settings import ApiSettings
from media_usage_worker.http.slow_clients import HeaderDeadlineProtocol
from media_usage_worker.pipeline.database import create_engine

DATABASE_URL_ENV = "MEDIA_USAGE_DATABASE_URL"
APP = f"{__name__}:app_from_environment"
PROTOCOL = f"{__name__}:HeaderDeadlineFromEnvironment"


@functools.cache
def _settings() -> ApiSettings:
    return ApiSettings.from_env()


def app_from_environment() -> FastAPI:
    """The API of one worker process: its own engine (connections are never shared across
    processes) over the database the command was given."""
    return create_app(create_engine(os.environ[DATABASE_URL_ENV]), _settings())


class HeaderDeadlineFromEnvironment(HeaderDeadlineProtocol):
    """The request deadline of ``MEDIA_USAGE_API_HEADER_TIMEOUT_SECONDS``, read in the worker."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.header_timeout_seconds = float(_settings().header_timeout_seconds)
        super().connection_made(transport)
