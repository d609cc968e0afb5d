"""``media-usage demo``: SQLite, a server-less broker, real worker and beat subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from repository.db import create_engine
from tests.index_oracle import actual_index, expected_index

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_indexes_every_entry_and_reports_it(tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "media_usage_worker", "demo", "--entries", "400", "--json",
         "--directory", str(directory), "--timeout", "240"],
        cwd=tmp_path,  # not the checkout: the installed package must carry everything
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["finished"] is True
    assert summary["entries_written"] == summary["entries_indexed"] == 400
    assert summary["coverage"] == {"articles": "complete", "products": "complete"}
    assert summary["items_per_second"] > 0 and summary["elapsed_seconds"] > 0
    assert "items/s" in done.stderr  # progress went to stderr next to the JSON summary

    engine = create_engine(f"sqlite:///{directory / 'demo.db'}")
    try:
        expected = expected_index(engine)
        assert summary["references"] == len(expected) > 400 * 3
        assert actual_index(engine) == expected
    finally:
        engine.dispose()


def test_the_demo_refuses_a_directory_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    done = subprocess.run(
        [sys.executable, "-m", "media_usage_worker", "demo", "--directory", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "is not empty" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
