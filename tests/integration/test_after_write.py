"""``after_write`` is called by host code right after its commit: it sends the item when it can
and never raises into the host, whatever is down or wrong."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import sqlalchemy as sa

from media_usage_worker.tasks.dispatch import after_write
from tests.servers import free_port
from tests.support import active_collection


def _after_write_in_a_host(database_url: str, broker_url: str) -> subprocess.CompletedProcess:
    """A host process of its own (its own app and broker settings), calling after_write."""
    script = (
        "import logging, sys; logging.basicConfig(level=logging.WARNING);"
        "from media_usage_worker.tasks.dispatch import after_write;"
        "print(repr(after_write('posts', 'e1')))"
    )
    env = {**os.environ, "MEDIA_USAGE_DATABASE_URL": database_url,
           "MEDIA_USAGE_BROKER_URL": broker_url}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )


def _written(db: sa.Engine) -> None:
    active_collection(db, "posts")
    with db.begin() as conn:
        conn.execute(sa.text("INSERT INTO ec_posts (id) VALUES ('e1')"))


def test_after_write_sends_the_item_when_the_broker_is_up(db, migrated_url, redis_url) -> None:
    _written(db)
    host = _after_write_in_a_host(migrated_url, redis_url)
    assert host.returncode == 0 and host.stdout.startswith("'"), host.stderr


def test_after_write_returns_none_and_logs_when_the_broker_is_down(db, migrated_url) -> None:
    _written(db)
    host = _after_write_in_a_host(migrated_url, f"redis://127.0.0.1:{free_port()}/0")
    assert (host.returncode, host.stdout.strip()) == (0, "None"), host.stderr
    assert "could not dispatch" in host.stderr and "Traceback" not in host.stderr
    with db.connect() as conn:  # the captured work is still there for the tick
        state = conn.execute(sa.text("SELECT state FROM _emdash_media_usage_work")).scalar()
    assert state == "pending"


@pytest.mark.parametrize("slug, content_id", [("Bad Slug!", "e1"), ("posts", ""), (None, 5)])
def test_after_write_with_bad_arguments_returns_none(
    db, migrated_url, monkeypatch, slug, content_id
) -> None:
    monkeypatch.setenv("MEDIA_USAGE_DATABASE_URL", migrated_url)
    active_collection(db, "posts")
    assert after_write(slug, content_id) is None
