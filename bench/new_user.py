"""``python -m bench backfill --new-user``: a new user's first backfill, while they keep editing.

As a user would try it: ``entries`` sample entries exist before this project does (capture
off), then the clock starts, a worker of ``workers`` processes and beat start (their start-up
is counted), ``media-usage activate`` runs, and in the first seconds the site updates 2,000
entries and deletes 1,000, a hundred a transaction. Measured: start to coverage ``complete`` on
every collection, and that the index then holds exactly the entries left. Side by side,
alternating: Wagtail 8.0's ``rebuild_references_index`` over a site of as many pages
(``../shared/peers/wagtail/build-and-time.sh N``), which has no queue and sees no edits.
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from bench.backfill import Backfill, _cli, _until_complete, wagtail_rebuild, wagtail_site
from bench.env import Bench, fill
from bench.stats import Figure, alternate, ratios
from media_usage_worker.repository.base.db import create_engine

UPDATES = 2000
DELETES = 1000
PER_TRANSACTION = 100
# The sample content alternates its entries over two collections (domain.sample_content).
_TABLES = ("ec_articles", "ec_products")


def _entry(index: int) -> tuple[str, str]:
    """The table and id of sample entry ``index``."""
    table = _TABLES[index % 2]
    return table, f"{table[3]}{index:07d}"


def _edit(engine: sa.Engine, entries: int) -> None:
    """2,000 updates (the first entries) and 1,000 deletes (the last), a hundred a transaction."""
    tables = {
        name: sa.table(name, sa.column("id", sa.Text), sa.column("title", sa.Text),
                       sa.column("version"))
        for name in _TABLES
    }  # fmt: skip

    def update(table: str, content_id: str) -> sa.Update:
        t = tables[table]
        return (
            t.update()
            .where(t.c.id == content_id)
            .values(title=t.c.title + " (edited)", version=t.c.version + 1)
        )

    def delete(table: str, content_id: str) -> sa.Delete:
        return tables[table].delete().where(tables[table].c.id == content_id)

    edits = [update(*_entry(i)) for i in range(UPDATES)]
    edits += [delete(*_entry(i)) for i in range(entries - DELETES, entries)]
    for start in range(0, len(edits), PER_TRANSACTION):
        with engine.begin() as conn:
            for statement in edits[start : start + PER_TRANSACTION]:
                conn.execute(statement)


def _indexed_entries(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT count(DISTINCT content_id) FROM _emdash_media_usage_sources "
                    "WHERE source_type = 'content'"
                )
            ).scalar_one()
        )


def new_user(bench: Bench, entries: int, workers: int) -> float:
    """Seconds from starting the worker to ``complete`` with the edits made meanwhile."""
    url = bench.inactive_database("postgresql")
    fill(url, entries)
    bench.flush_redis()
    env = bench.env(url)
    engine = create_engine(url)
    started = time.monotonic()
    bench.celery("tasks", ["beat", "-s", str(bench.tmp / f"beat-{time.time()}")], env)
    worker = bench.worker("tasks", "media_usage", workers, env)
    _cli(env, "activate")
    _edit(engine, entries)
    _until_complete(engine, worker, Backfill())
    seconds = time.monotonic() - started
    bench.stop_all()
    left = _indexed_entries(engine)
    engine.dispose()
    if left != entries - DELETES:
        raise RuntimeError(f"the index holds {left} entries, not {entries - DELETES}")
    return seconds


def run(bench: Bench, entries: int, repeat: int, workers: int) -> list[str]:
    site = wagtail_site(entries)
    if site is None:
        return [
            f"new-user run skipped: no Wagtail site of {entries:,} pages (build it with "
            f"../shared/peers/wagtail/build-and-time.sh {entries})"
        ]
    ours, peer = alternate(
        repeat,
        lambda: new_user(bench, entries, workers),
        lambda: entries / wagtail_rebuild(site, entries),
    )
    name = f"new user PG {entries:,} (+{UPDATES:,} updates, {DELETES:,} deletes)"
    return [
        Figure(f"{name} start -> complete", tuple(ours), "s").line(),
        Figure(f"wagtail rebuild_references_index {entries:,} pages", tuple(peer), "s").line(),
        Figure(f"{name} wagtail/ours", tuple(ratios(peer, ours)), "").line(),
    ]
