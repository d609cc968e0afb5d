"""A host's long transaction on one collection stalls nothing else: a worker never waits on the
collection's status row or for longer than a bounded lock wait on its content table."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.pipeline.process import process_work_item
from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.repository.index.projection import CONTENT_LOCK_TIMEOUT_MS
from media_usage_worker.repository.work_queue.work import MediaUsageWorkRepository
from tests.support import active_collection, drain

HERO = [FieldDefinition("title", "Title", "string"), FieldDefinition("hero", "Hero", "image")]


@pytest.fixture
def two_collections(db: sa.Engine, dialect: str):
    if dialect == "sqlite":
        pytest.skip("SQLite has no row locks: a content write keeps every other writer out")
    posts = active_collection(db, "posts", HERO)
    pages = active_collection(db, "pages", HERO)
    with db.begin() as conn:
        conn.execute(sa.text("INSERT INTO ec_posts (id, hero) VALUES ('p0', 'm0')"))
    drain(db)
    with db.begin() as conn:
        conn.execute(sa.text("INSERT INTO ec_posts (id, hero) VALUES ('p1', 'm1')"))
        for i in range(30):
            conn.execute(
                sa.text("INSERT INTO ec_pages (id, hero) VALUES (:i, 'm2')"), {"i": f"g{i:02d}"}
            )
    return posts, pages


def _process_in_time(db: sa.Engine, collection_id: str, content_id: str, seconds: float) -> str:
    """Process one item in a thread; fail if it is still waiting after ``seconds``."""
    (record,) = [
        r for r in MediaUsageWorkRepository(db).find_due_work(100) if r.content_id == content_id
    ]
    outcome: list[str] = []
    worker = threading.Thread(
        target=lambda: outcome.append(
            str(
                process_work_item(
                    db,
                    collection_id=collection_id,
                    content_id=content_id,
                    work_version=record.work_version,
                ).outcome
            )
        ),
        daemon=True,
    )
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"the worker waited more than {seconds} s on the host"
    return outcome[0]


@contextlib.contextmanager
def _host_holding(url: str, statement: str) -> Iterator[None]:
    """A host connection that ran ``statement`` in a transaction it keeps open."""
    engine = create_engine(url)
    with engine.connect() as host:
        held = host.begin()
        try:
            host.execute(sa.text(statement))
            yield
        finally:
            held.rollback()
    engine.dispose()


def test_a_host_transaction_holding_the_status_row_stalls_no_worker(
    db: sa.Engine, migrated_url: str, two_collections
) -> None:
    posts, pages = two_collections
    # The capture trigger of this update holds posts' status row until the host commits.
    with _host_holding(migrated_url, "UPDATE ec_posts SET title = 'long' WHERE id = 'p0'"):
        assert _process_in_time(db, posts.id, "p1", 20) == "completed"
        drain(db)  # pages' 30 items (and nothing of posts is due now but the host's own)
        left = {r.collection_id for r in MediaUsageWorkRepository(db).find_due_work(100)}
        assert pages.id not in left


def test_a_host_holding_the_content_table_exclusively_costs_a_bounded_wait(
    db: sa.Engine, migrated_url: str, two_collections
) -> None:
    posts, _ = two_collections
    with _host_holding(migrated_url, "LOCK TABLE ec_posts IN ACCESS EXCLUSIVE MODE"):
        bound = CONTENT_LOCK_TIMEOUT_MS / 1000 + 15
        assert _process_in_time(db, posts.id, "p1", bound) == "retry"
