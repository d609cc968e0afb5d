"""The console in a real Chromium (Debian's, driven by Playwright) against ``media-usage serve``
on loopback, on both dialects: sign in, read what the API reads, retire from the page, restore,
follow a media item's uses; refusals for a wrong token, a missing CSRF token and stale coverage.

Each page is photographed into the test's directory (and into
``MEDIA_USAGE_CONSOLE_SCREENSHOTS`` when set: that is how docs/console.md's pictures are made).
"""

from __future__ import annotations

import os
import re
import shutil
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from media_usage_worker.pipeline.registry import request_reindex
from media_usage_worker.repository.registry.collections import find_collection
from tests.http_server import TOKEN, Api, serving
from tests.integration.test_cleanup import LIBRARY, cleanup_site
from tests.support import get_work, insert_work

playwright_sync = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ADMIN = "https://cms.example/admin/{collection}/{id}"


def _png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A valid PNG of one colour: thumbnails to load."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    row = b"\x00" + bytes(rgb) * width
    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + b"\x08\x02\x00\x00\x00"
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(row * height)) + chunk(b"IEND", b""))  # fmt: skip


@pytest.fixture
def media_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "media"
    directory.mkdir()
    for index, (name, kind, _, _) in enumerate(LIBRARY.values()):
        if kind == "image/png":
            (directory / name).write_bytes(_png(32, 24, (40 * index, 120, 200 - 30 * index)))
    return directory


@pytest.fixture
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    with playwright_sync.sync_playwright() as driver:
        launched = driver.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-background-networking"],
        )
        try:
            yield launched
        finally:
            launched.close()


def _last_hour_of_samples(db: sa.Engine) -> None:
    """An hour of the dispatch tick's samples, as a busy site leaves them: a backlog that
    grows, then drains."""
    with db.connect() as conn:
        now = conn.execute(sa.text("SELECT CURRENT_TIMESTAMP")).scalar_one()
    end = now if isinstance(now, datetime) else datetime.fromisoformat(str(now))
    if end.tzinfo is not None:  # PostgreSQL's, in the session's zone: the samples are UTC
        end = end.astimezone(UTC)
    writes, queued, rows = 0, 0, []
    for step in range(60):
        at = end.replace(tzinfo=None) - timedelta(minutes=59 - step, seconds=5)
        writes += 40 if step < 30 else 5
        queued = max(0, queued + (25 if step < 30 else -35))
        rows.append({"at": at.strftime("%Y-%m-%dT%H:%M:%S.000Z"), "w": writes, "q": queued})
    with db.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO _media_usage_worker_pace (sampled_at, writes, queued) "
                    "VALUES (:at, :w, :q)"),
            rows,
        )  # fmt: skip


class Shots:
    """Screenshots of each page, into the test's directory and the docs' when asked."""

    def __init__(self, directory: Path, dialect: str) -> None:
        self.directories = [directory]
        if wanted := os.environ.get("MEDIA_USAGE_CONSOLE_SCREENSHOTS"):
            self.directories.append(Path(wanted))
        self.dialect = dialect

    def take(self, page: Any, name: str) -> None:
        for directory in self.directories:
            directory.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(directory / f"console-{name}-{self.dialect}.png"),
                            full_page=True)  # fmt: skip


def _sign_in(page: Any, base: str, token: str) -> None:
    page.goto(f"{base}/console/login")
    page.get_by_label("Operator token").fill(token)
    page.get_by_role("button", name="Sign in").click()


def test_an_operator_reads_retires_and_restores_from_the_console(
    db: sa.Engine, migrated_url: str, dialect: str, media_dir: Path, tmp_path: Path,
    browser: Any,
) -> None:  # fmt: skip
    site = cleanup_site(db)
    _last_hour_of_samples(db)
    shots = Shots(tmp_path / "shots", dialect)
    env = {"MEDIA_USAGE_STORAGE_DIR": str(media_dir), "MEDIA_USAGE_ADMIN_URL": ADMIN}
    with serving(migrated_url, tmp_path, **env) as api:
        base = api.base
        page = browser.new_page(viewport={"width": 1280, "height": 900})

        # Reading needs a session: the console sends the browser to sign in.
        page.goto(f"{base}/console/unused")
        assert page.url.startswith(f"{base}/console/login")
        page.get_by_label("Operator token").fill("not-the-token-at-all")
        page.get_by_role("button", name="Sign in").click()
        assert page.get_by_role("alert").inner_text() == "That is not the operator token."
        shots.take(page, "login")
        _sign_in(page, base, TOKEN)
        assert page.url == f"{base}/console/"
        cookie = next(c for c in page.context.cookies() if c["name"] == "media_usage_console")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"

        # The overview says what the API says.
        status = api.get("/v1/status").json
        assert page.get_by_test_id("coverage").inner_text() == status["coverage"]
        assert page.get_by_test_id("capture").inner_text() == status["capture"]
        assert page.locator("svg.chart polyline").count() == 2  # the queue and the rate
        shots.take(page, "overview")

        # The unused list: the page's counts are the API's, filtered the same way.
        page.get_by_role("link", name="Unused").click()
        listed = api.get("/v1/unused").json
        assert int(page.get_by_test_id("total-count").inner_text()) == listed["total_count"]
        page.get_by_label("Type").select_option("image/")
        page.get_by_role("button", name="Filter").click()
        images = api.get("/v1/unused?mime=image/").json
        assert int(page.get_by_test_id("total-count").inner_text()) == images["total_count"]
        assert page.locator("img").count() == len(images["items"]) > 0  # thumbnails load
        assert page.evaluate("[...document.images].every(i => i.complete && i.naturalWidth > 0)")
        page.get_by_label("Type").select_option("")
        page.get_by_role("button", name="Filter").click()
        shots.take(page, "unused")

        # "All shown" previews every item of the page (without JavaScript too: the server
        # reads the page's ids); going back retires nothing.
        page.get_by_label("All shown (3)").check()
        assert page.locator('input[name="id"]:checked').count() == 3  # the script ticks them
        page.get_by_role("button", name="Retire…").click()
        assert page.get_by_test_id("would-retire").inner_text() == str(len(listed["items"]))
        page.get_by_role("link", name="Back to the list").click()
        assert api.get("/v1/unused").json["total_count"] == listed["total_count"]

        # Retire two from the page: a preview with the rule's checks first, then the act.
        unused = [item["id"] for item in listed["items"]][:2]
        for media_id in unused:
            page.locator(f'input[name="id"][value="{media_id}"]').check()
        page.get_by_role("button", name="Retire…").click()
        assert page.get_by_test_id("would-retire").inner_text() == "2"
        assert api.get("/v1/unused").json["total_count"] == listed["total_count"]  # not yet
        shots.take(page, "preview")
        page.get_by_role("button", name="Retire 2 item(s)").click()
        assert page.url.startswith(f"{base}/console/quarantine")
        assert page.get_by_role("status").inner_text().startswith("Retired")
        rows = page.get_by_test_id("quarantine").locator("tbody tr")
        assert sorted(rows.evaluate_all("rs => rs.map(r => r.dataset.id)")) == sorted(unused)
        shots.take(page, "quarantine")

        # Restore one: it leaves the quarantine and is back in the library.
        page.get_by_role("button", name=f"Restore {LIBRARY[unused[0]][0]}").click()
        assert page.get_by_role("status").inner_text() == "Restored to the library."
        left = rows.evaluate_all("rs => rs.map(r => r.dataset.id)")
        assert left == [unused[1]]
        with db.connect() as conn:
            back = conn.execute(sa.text("SELECT id FROM media WHERE id = :i"), {"i": unused[0]})
            assert back.scalar_one() == unused[0]
        page.get_by_role("link", name="Overview").click()
        assert page.get_by_test_id("quarantined").inner_text() == "1 item(s)"

        # The purge preview runs every check, the final sweep included, and removes nothing.
        page.get_by_role("link", name="Quarantine").click()
        page.get_by_label("Retired more than (days) ago").fill("0")
        page.get_by_role("button", name="Preview the purge").click()
        assert page.get_by_test_id("would-purge").inner_text() == "1"
        assert page.get_by_test_id("quarantine").locator("tbody tr").count() == 1

        # A media item's uses, with a link into the host's admin.
        page.goto(f"{base}/console/media/m4")
        uses = page.get_by_test_id("uses").locator("tbody tr")
        assert uses.count() == 1
        assert re.search(r"posts.*p1.*hero", uses.first.inner_text(), re.S)
        link = uses.first.get_by_role("link")
        assert link.get_attribute("href") == "https://cms.example/admin/posts/p1"
        page.goto(f"{base}/console/media/{unused[1]}")
        assert page.get_by_test_id("state").inner_text().startswith("retired")
        shots.take(page, "media")
        for name in ("dangling", "audit"):
            page.goto(f"{base}/console/{name}")
            shots.take(page, name)
        assert "retire" in page.get_by_test_id("audit").inner_text()

        # A form without the session's CSRF token changes nothing.
        forged = page.request.post(
            f"{base}/console/quarantine/restore",
            form={"id": unused[1]},
            max_redirects=0,
        )
        assert forged.status == 403
        with db.connect() as conn:
            still = conn.execute(
                sa.text("SELECT count(*) FROM _media_usage_worker_quarantine WHERE id = :i"),
                {"i": unused[1]},
            )
            assert still.scalar_one() == 1

        # Nothing is offered while coverage is not complete, and the page says why.
        request_reindex(site, "posts")
        page.goto(f"{base}/console/unused")
        why = page.get_by_test_id("not-known").inner_text()
        assert "not known yet" in why
        assert re.search(r"posts: stale: .*(last complete \S+|never complete yet)", why), why
        assert page.get_by_role("button", name="Retire…").count() == 0
        assert page.locator('input[name="id"]').count() == 0
        shots.take(page, "stale")

        # A failed item is retried from the overview.
        posts = find_collection(site, "posts")
        assert posts is not None
        insert_work(site, posts, "p1", state="failed", attempt_count=5,
                    last_error_code="CONTENT_USAGE_SNAPSHOT_FAILED")  # fmt: skip
        page.goto(f"{base}/console/")
        page.get_by_role("button", name="Retry p1").click()
        assert page.get_by_role("status").inner_text().startswith("The item is pending again")
        assert (get_work(site, posts.id, "p1") or {})["state"] == "pending"

        # Signing out ends the session.
        page.goto(f"{base}/console/")
        page.get_by_role("button", name="Sign out").click()
        page.goto(f"{base}/console/")
        assert page.url.startswith(f"{base}/console/login")


def test_public_reads_show_the_console_without_a_session_but_never_act(
    db: sa.Engine, migrated_url: str, tmp_path: Path, browser: Any
) -> None:
    cleanup_site(db)
    with serving(migrated_url, tmp_path, MEDIA_USAGE_API_PUBLIC_READS="1") as api:
        page = browser.new_page()
        page.goto(f"{api.base}/console/unused")
        assert page.url == f"{api.base}/console/unused"
        assert page.get_by_role("button", name="Retire…").count() == 0
        assert page.get_by_role("link", name="Sign in to retire").count() == 1
        refused = page.request.post(
            f"{api.base}/console/unused/retire", form={"id": "m1", "csrf": "x"}
        )
        assert refused.status == 403
        assert Api(api.base, api.log).get("/v1/media/m1/usage", token=None).status == 200
