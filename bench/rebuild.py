"""(e) A single-process rebuild: what a CMS's "rebuild the reference index" command does.

One process, no Celery, no work table, no leases: read every entry of every collection in
pages, extract, and write the same sources and occurrences in one transaction per page. It is
the cheapest way this code base has to produce the index, so (d)/(e) says what the queue,
leases and fencing of the pipeline cost or gain over a plain loop.
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from bench.env import Bench, busy_core_seconds, fill
from media_usage_worker.domain.policy import Limits
from media_usage_worker.pipeline.refresh import refresh_entries
from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.repository.base.schema import collections, sources
from media_usage_worker.repository.registry.content_tables import content_columns

PAGE = 1000


def rebuild(bench: Bench, dialect: str, entries: int, cpu: dict[str, float] | None = None) -> float:
    """Entries/s of the rebuild over ``entries`` freshly written sample entries; with ``cpu``,
    also the machine's busy core-seconds over that time."""
    url = bench.database(dialect)
    fill(url, entries)
    engine = create_engine(url)
    with engine.begin() as conn:
        # Not part of a rebuild: the captured work would only be done twice.
        conn.execute(sa.text("DELETE FROM _emdash_media_usage_work"))
    started, busy = time.monotonic(), busy_core_seconds()
    with engine.connect() as conn:
        registered = conn.execute(sa.select(collections.c.id, collections.c.slug)).all()
        conn.commit()
        for collection_id, slug in registered:
            table = content_columns(slug)
            ids = list(conn.execute(sa.select(table.c.id).order_by(table.c.id)).scalars())
            conn.commit()
            for start in range(0, len(ids), PAGE):
                # One read and one write transaction per page, as repair does.
                refresh_entries(conn, collection_id, slug, ids[start : start + PAGE], Limits())
    elapsed = time.monotonic() - started
    if cpu is not None:
        cpu["busy_core_seconds"] = busy_core_seconds() - busy
    with engine.connect() as conn:
        written = conn.execute(sa.select(sa.func.count()).select_from(sources)).scalar_one()
    engine.dispose()
    if written < entries:
        raise RuntimeError(f"the rebuild wrote {written} sources for {entries} entries")
    return entries / elapsed
