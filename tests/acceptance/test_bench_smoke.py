"""``python -m bench all --smoke``: every benchmark runs end to end at tiny sizes, so the harness
cannot rot between the on-demand full runs. Only that it works and prints each figure is
asserted; no figure is compared with a threshold (speed is never a unit-test assertion)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIGURE = re.compile(r"^(?P<name>.+?)\s+min\s+(?P<min>[\d.]+)\s+median\s+(?P<median>[\d.]+)\s+max")


def test_every_benchmark_runs_and_prints_its_figures() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "all", "--smoke", "--workers", "2"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    figures = {
        m["name"]: float(m["median"])
        for line in done.stdout.splitlines()
        if (m := FIGURE.match(line.strip()))
    }
    expected = [
        "drain PG 2 workers (a) pipeline, item by item",
        "drain PG 2 workers (d) pipeline, batches",
        "drain PG 2 workers (e) single-process rebuild",
        "drain PG 2 workers (b) plain Celery",
        "drain PG 2 workers d/a",
        "drain PG 2 workers d/e",
        "drain PG 2 workers (c) procrastinate",
        "drain PG 2 workers a/b",
        "drain PG 2 workers a/c",
        "drain SQLite 2 workers (d) pipeline, batches",
        "cpu (a) item by item, 2 workers",
        "cpu (d) batches, 2 workers",
        "cpu (e) rebuild",
        "single items in one process, PG",
        "single items in one process, SQL per item",
        "tick 10,000/1,000, budget 10",
        "backfill PG 200 activation -> complete",
        "backfill PG 200 (e) single-process rebuild",
        "backfill SQLite 200 activation -> complete",
    ]
    assert [name for name in expected if figures.get(name, 0) <= 0] == [], done.stdout
    assert "Index Scan using idx__emdash_media_usage_work_due" in done.stdout  # the EXPLAIN
    assert re.search(r"fast path\s+idle\s+p50\s+[\d.]+ ms", done.stdout), done.stdout
    assert re.search(r"worker RSS after [\d,]+ items [\d.]+ MiB", done.stdout), done.stdout
    # The read benchmark: every read beside its floor, and HTTP under concurrent clients.
    for dialect in ("postgresql", "sqlite"):
        for read in ("usage_count", "usage_counts of 1,000 ids", "usage page, first",
                     "usage page, third (cursor)", "coverage", "status"):  # fmt: skip
            assert re.search(rf"reads {dialect} {re.escape(read)}\s+p50\s+[\d.]+ ms", done.stdout)
        assert re.search(rf"reads {dialect} usage_count .*floor p50 [\d.]+", done.stdout)
        assert re.search(rf"reads {dialect} HTTP /v1/usage.* errors 0 ", done.stdout), done.stdout
        # The clean-up: the unused listing, and retire --all-unused beside a writer.
        assert re.search(rf"cleanup {dialect} [\d,]+ unused; first page p50 [\d.]+ ms",
                         done.stdout), done.stdout  # fmt: skip
        assert re.search(rf"cleanup {dialect} retire --all-unused: [\d,]+ retired in",
                         done.stdout), done.stdout  # fmt: skip
        # The console's pages, each with its latency.
        for page in ("/console/ ", "/console/unused ", "/console/quarantine "):
            assert re.search(rf"console {dialect} {page} p50 [\d.]+ ms  p99 [\d.]+ ms",
                             done.stdout), done.stdout  # fmt: skip
