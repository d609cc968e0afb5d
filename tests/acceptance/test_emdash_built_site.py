"""A site built by emdash 0.32.0's own code (from the npm registry, with the builder scripts kept
beside this project's peers), adopted with the README's steps only, indexed by a real worker and
beat, and followed while emdash writes more, changes its schema and deletes a collection: every
media item's uses and the ``unused`` listing agree with a truth computed from the rows.

The npm install and the better-sqlite3 build (``tests/emdash_builder.py``) take about a minute
and a half; ``.ci/run`` starts them before the suite, and they are kept in ``.ci-cache/`` of the
checkout, so a second run in the same directory starts at once."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa

from media_usage_worker.api import MediaUsage
from media_usage_worker.repository.base.db import create_engine
from tests.emdash_builder import build, builder
from tests.emdash_truth import truly_used
from tests.processes import Processes, cli, wait_for

pytestmark = pytest.mark.slow

SETTLE_SECONDS = 180


def run(command: list[str], cwd: Path, timeout: float) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture(scope="session")
def emdash_032() -> Path:
    """A folder with emdash 0.32.0 installed and the builder scripts beside it."""
    if builder() is None:
        pytest.skip("emdash's site builder is not found (MEDIA_USAGE_EMDASH_BUILDER)")
    for tool in ("node", "npm"):
        assert shutil.which(tool), f"{tool} is needed (Debian's nodejs and npm; .ci/run installs)"
    built = build()
    assert built is not None
    return built


@pytest.fixture
def emdash_site(emdash_032: Path, tmp_path: Path) -> Iterator[tuple[str, sa.Engine]]:
    path = tmp_path / "site.db"
    run(["node", "make-db.mjs", str(path), "initial"], emdash_032, 120)
    url = f"sqlite:///{path}"
    engine = create_engine(url)
    yield url, engine
    engine.dispose()


def disagreement(engine: sa.Engine) -> str | None:
    """What the index says that the rows do not; ``None`` when every answer agrees."""
    library, used = truly_used(engine)
    index = MediaUsage(engine)
    page = index.unused(limit=100)
    if not page.known:
        return f"unused not known yet (coverage {page.coverage})"
    listed = {item.id for item in page.items}
    if listed != library - used:
        return f"unused lists {sorted(listed ^ (library - used))} wrongly"
    for media_id in sorted(library):
        if bool(index.usage(media_id).entries) != (media_id in used):
            return f"usage of {media_id} disagrees with the rows"
    return None


def agrees(engine: sa.Engine) -> None:
    found: list[str | None] = [None]

    def settled() -> bool:
        found[0] = disagreement(engine)
        return found[0] is None

    try:
        wait_for(settled, timeout=SETTLE_SECONDS, interval=1.0)
    except AssertionError:
        raise AssertionError(f"the index never agreed with the rows: {found[0]}") from None


def test_a_site_emdash_built_is_adopted_and_followed_as_emdash_keeps_writing(
    emdash_032: Path, emdash_site: tuple[str, sa.Engine], redis_url: str, tmp_path: Path
) -> None:
    url, engine = emdash_site
    for step in (("db", "upgrade"), ("activate",)):  # the README's steps, nothing else
        done = cli(*step, url=url)
        assert done.code == 0, done.err
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    client.close()
    processes = Processes(
        {
            "MEDIA_USAGE_DATABASE_URL": url,
            "MEDIA_USAGE_BROKER_URL": redis_url,
            "MEDIA_USAGE_TICK_SECONDS": "1",
            "MEDIA_USAGE_RECONCILE_SECONDS": "1",
            "MEDIA_USAGE_RECONCILE_DEFER_SECONDS": "1",
            # A worker stopped with items leased: they are due again soon.
            "MEDIA_USAGE_LEASE_SECONDS": "5",
        },
        tmp_path,
    )

    def start() -> list[subprocess.Popen[bytes]]:
        return [processes.worker(concurrency=2), processes.beat()]

    def stop(running: list[subprocess.Popen[bytes]]) -> None:
        # emdash's SQLite writes are deferred transactions that read, then write: a commit of
        # the worker's in between fails them with SQLITE_BUSY_SNAPSHOT (docs/operations.md,
        # "Running on an existing emdash site"), so emdash writes while the workers are down,
        # and they catch up from the capture triggers when they are back.
        for proc in running:
            processes.kill(proc)

    try:
        running = start()
        agrees(engine)
        library, used = truly_used(engine)
        assert used and library - used, "the site has used and unused items"

        # emdash writes more through its own code: new, updated, trashed and deleted entries,
        # a field added and one deleted, a new collection, a media item and a logo changed.
        site = str(engine.url.database)
        stop(running)
        run(["node", "make-db.mjs", site, "more"], emdash_032, 120)
        running = start()
        agrees(engine)
        stop(running)
        run(["node", "delete-collection.mjs", site, "pages"], emdash_032, 120)
        running = start()
        with engine.connect() as conn:
            left = conn.execute(
                sa.text("SELECT count(*) FROM _emdash_collections WHERE slug = 'pages'")
            ).scalar_one()
        assert left == 0, "emdash deleted the collection"
        agrees(engine)
    finally:
        processes.stop_all()
    assert "Traceback" not in processes.logs()
