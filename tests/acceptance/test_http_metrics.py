"""``/metrics`` scraped while a real worker and beat drain a backlog: the work gauge
is read from the database on each scrape and falls to zero."""

from __future__ import annotations

import re
from pathlib import Path

import sqlalchemy as sa

from media_usage_worker.domain.content_model import FieldDefinition
from tests.http_server import serving
from tests.processes import Processes, wait_for
from tests.support import active_collection

WORK = re.compile(r'^media_usage_work_items\{collection="posts",state="(\w+)"\} (\S+)$', re.M)


def test_the_work_gauge_falls_to_zero_while_the_worker_drains(
    db: sa.Engine, migrated_url: str, processes: Processes, tmp_path: Path
) -> None:
    active_collection(db, "posts", [FieldDefinition("hero", "Hero", "image")])
    with db.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO ec_posts (id, hero) VALUES (:id, :hero)"),
            [{"id": f"e{i}", "hero": f"m{i % 7}"} for i in range(300)],
        )
    seen: list[float] = []

    with serving(migrated_url, tmp_path, MEDIA_USAGE_METRICS_CACHE_SECONDS="1") as api:

        def work_items() -> float:
            scrape = api.get("/metrics")
            assert scrape.status == 200, scrape.text
            total = sum(float(value) for _, value in WORK.findall(scrape.text))
            seen.append(total)
            return total

        assert work_items() == 300  # the backlog, before any worker runs
        processes.worker(concurrency=2)
        processes.beat()
        wait_for(lambda: work_items() == 0, timeout=180, interval=0.5)
    # Scraped between the two: the gauge followed the table (a reconciliation pass may queue
    # entries again, so it need not fall monotonically).
    assert seen[0] == 300 and seen[-1] == 0
