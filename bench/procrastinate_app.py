"""Side (c) of the drain benchmark: procrastinate running the same per-item refresh.

procrastinate keeps its jobs in PostgreSQL and locks each with ``FOR UPDATE SKIP LOCKED``, so
it is the nearest design to this pipeline without Celery. Each worker process runs one job at
a time, like a Celery pool process.
"""

from __future__ import annotations

import os

import procrastinate
import sqlalchemy as sa

from media_usage_worker.domain.policy import Limits
from media_usage_worker.domain.snapshots import ContentEntry
from media_usage_worker.pipeline.refresh import refresh_entry
from media_usage_worker.tasks.engines import get_engine

QUEUE = "bench_procrastinate"
TASK = "bench.refresh"


def conninfo(url: str) -> str:
    """libpq's form of a SQLAlchemy URL (``postgresql+psycopg://`` → ``postgresql://``)."""
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def refresh(collection_id: str, collection_slug: str, content_id: str) -> None:
    code = refresh_entry(
        get_engine(), ContentEntry(collection_id, collection_slug, content_id), Limits()
    )
    if code is not None:
        raise RuntimeError(code)


def make_app(url: str) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo(url)))
    app.task(name=TASK, queue=QUEUE)(refresh)
    return app


# What ``procrastinate --app=bench.procrastinate_app.app worker`` loads in a worker process.
app = make_app(os.environ.get("MEDIA_USAGE_DATABASE_URL", "postgresql://"))
