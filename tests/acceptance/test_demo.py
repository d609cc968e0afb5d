"""``media-usage demo``: SQLite, a server-less broker, real worker and beat subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.repository.index.usage import usage_page
from tests.doc_examples import differences, examples
from tests.http_server import serving
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
    # The sample site's favicon, logo, social image, avatars and menu rows are sources too.
    assert summary["sources"] == {
        "byline": "complete", "settings": "complete", "user": "complete",
        "table:sample_menu_items": "complete",
    }  # fmt: skip
    assert summary["source_rows_indexed"] == 7
    assert summary["items_per_second"] > 0 and summary["elapsed_seconds"] > 0
    assert "items/s" in done.stderr  # progress went to stderr next to the JSON summary
    # docs/cli.md's example has exactly these keys.
    (documented,) = [e for _, e in examples("cli.md") if "entries_written" in e]
    data_keyed = frozenset({"$.coverage", "$.sources", "$.failed"})
    assert differences(documented, summary, data_keyed) == []
    # The settings to go on with the demo's database: the CLI answers with them alone.
    environment = summary["environment"]
    assert environment == {
        "MEDIA_USAGE_DATABASE_URL": f"sqlite:///{directory / 'demo.db'}",
        "MEDIA_USAGE_BROKER_URL": "filesystem://",
        "MEDIA_USAGE_BROKER_FOLDER": str(directory / "broker"),
    }
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEDIA_USAGE_")}
    status = subprocess.run(
        [sys.executable, "-m", "media_usage_worker", "status", "--json"],
        cwd=tmp_path, env={**clean, **environment}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["coverage"] == "complete"

    # Stopped by Celery's warm shutdown: no pool child reported killed under its parent.
    assert "exited with signal" not in (directory / "worker.log").read_text()

    engine = create_engine(f"sqlite:///{directory / 'demo.db'}")
    try:
        expected = expected_index(engine)
        assert summary["references"] == len(expected) > 400 * 3
        assert actual_index(engine) == expected
        # The demo's media are library items: ``usage`` lists them as such.
        used = sorted(row[3] for row in expected if (row[3] or "").startswith("media-"))
        page = usage_page(engine, used[0])
        assert page.in_library and page.entries
        favicon = usage_page(engine, "media-0000").entries
        assert ("settings", "site:favicon") in {(e.kind, e.content_id) for e in favicon}
    finally:
        engine.dispose()

    # The console on the demo's database (what scripts/console serves): its overview.
    with serving(environment["MEDIA_USAGE_DATABASE_URL"], tmp_path,
                 MEDIA_USAGE_API_PUBLIC_READS="1") as api:  # fmt: skip
        overview = api.get("/console/", token=None)
        assert overview.status == 200
        assert 'data-testid="coverage" class="coverage-complete">complete<' in overview.text
        for slug in ("articles", "products"):
            assert f'data-scope="{slug}"' in overview.text
        assert api.get("/console/unused", token=None).status == 200


def test_scripts_console_serves_the_database_it_is_given(tmp_path: Path) -> None:
    """``scripts/console`` in a checkout whose .venv is stubbed: which command does it run?"""
    calls = _stubbed_checkout(tmp_path, "console")
    database = tmp_path / "demo.db"
    database.write_bytes(b"")
    env = {k: v for k, v in os.environ.items() if k != "MEDIA_USAGE_API_TOKEN"}
    done = subprocess.run(["bash", str(tmp_path / "scripts" / "console"), str(database)],
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "operator token (sign in with it):" in done.stdout
    lines = calls.read_text().splitlines()
    assert any("pip install" in line and "[api]" in line for line in lines)
    assert lines[-1] == f"media-usage serve --port 8080 --database-url sqlite:///{database}"
    missing = subprocess.run(["bash", str(tmp_path / "scripts" / "console"), "nothing.db"],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert missing.returncode == 2 and "no file nothing.db" in missing.stderr


def _stubbed_checkout(tmp_path: Path, script: str) -> Path:
    """A checkout holding ``scripts/<script>`` whose .venv's python and media-usage only write
    their command lines to the file returned."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / script, tmp_path / "scripts" / script)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    calls = tmp_path / "calls.txt"
    for name in ("python", "media-usage"):
        stub = bin_dir / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> "{calls}"\n')
        stub.chmod(0o755)
    return calls


def test_scripts_demo_installs_once_until_pyproject_changes(tmp_path: Path) -> None:
    """``scripts/demo`` in a checkout whose .venv is stubbed: which commands did it run?"""
    calls = _stubbed_checkout(tmp_path, "demo")

    def run_demo() -> list[str]:
        subprocess.run(["bash", str(tmp_path / "scripts" / "demo"), "--entries", "5"],
                       check=True, timeout=60)  # fmt: skip
        lines = calls.read_text().splitlines()
        calls.unlink()
        return lines

    first = run_demo()
    assert (
        any("pip install" in line for line in first) and first[-1] == "media-usage demo --entries 5"
    )
    assert run_demo() == ["media-usage demo --entries 5"]  # nothing changed: no reinstall
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'y'\n")
    assert any("pip install" in line for line in run_demo())


def test_the_package_metadata_uses_an_spdx_license() -> None:
    # A license table makes every install print setuptools' deprecation banner.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(project["project"]["license"], str)


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


def test_a_demo_cut_short_reports_what_it_did_and_no_rate(tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "media_usage_worker", "demo", "--entries", "3000", "--json",
         "--directory", str(directory), "--timeout", "2"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["finished"] is False
    assert summary["items_per_second"] is None
    assert summary["entries_indexed"] < summary["entries_written"] or summary["work_left"] > 0
    assert "did not finish within 2 s" in done.stderr
