"""Reads never wait behind a writer: on SQLite they begin deferred, on PostgreSQL MVCC holds.

Before, every SQLite transaction began ``IMMEDIATE``, so ``status``, ``work list``, ``usage``
and the tick's selection queued for the write lock behind a long host write and failed after
the 30 s busy timeout.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy as sa

from media_usage_worker.repository.base.db import read_transaction
from media_usage_worker.repository.index import usage
from media_usage_worker.repository.reconciling import status
from media_usage_worker.repository.registry.collections import CollectionRegistry
from media_usage_worker.repository.work_queue.work import MediaUsageWorkRepository
from tests.support import active_collection, insert_work

# Far below the 30 s busy timeout a reader would otherwise wait for.
DEADLINE_SECONDS = 10


@contextmanager
def open_write(engine: sa.Engine, slug: str) -> Iterator[None]:
    """A host write held open: SQLite's write lock, PostgreSQL's row locks."""
    if engine.dialect.name == "sqlite":
        writer = sqlite3.connect(engine.url.database, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")
        writer.execute(f"INSERT INTO ec_{slug} (id) VALUES ('held')")
        try:
            yield
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        return
    with engine.connect() as conn, conn.begin() as held:
        conn.execute(sa.text(f"INSERT INTO ec_{slug} (id) VALUES ('held')"))
        conn.execute(sa.text("UPDATE _emdash_media_usage_work SET updated_at = updated_at"))
        yield
        held.rollback()


def every_reader(engine: sa.Engine) -> None:
    repo = MediaUsageWorkRepository(engine)
    registry = CollectionRegistry(engine)
    collection = registry.get("posts")
    assert collection is not None
    registry.list()
    registry.fields(collection.id)
    status.overview(engine)
    status.index_totals(engine)
    assert not usage.usage_page(engine, "no-such-media").in_library
    assert usage.usage_count(engine, "no-such-media")[1] is None  # coverage is not complete
    assert repo.find_operator_page(collection_slug="posts").items
    assert repo.find_due_page("pending", 10)
    repo.oldest_due()
    repo.find_work_for_content("posts", "e1")


def test_readers_answer_while_a_write_is_held(db) -> None:
    posts = active_collection(db, "posts")
    insert_work(db, posts, "e1")
    failures: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        try:
            every_reader(db)
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)
        finally:
            done.set()

    with open_write(db, "posts"):
        reader = threading.Thread(target=read)
        reader.start()
        finished = done.wait(DEADLINE_SECONDS)
    reader.join()
    assert finished, "a reader waited for the writer"
    assert not failures, failures


def test_a_read_transaction_leaves_the_write_lock_free_and_restores_the_connection(
    db,
) -> None:
    if db.dialect.name != "sqlite":
        with read_transaction(db) as conn:
            assert conn.execute(sa.text("SELECT 1")).scalar_one() == 1
        return
    peer = sqlite3.connect(db.url.database, timeout=0, isolation_level=None)
    with db.connect() as conn:
        with read_transaction(conn):
            conn.execute(sa.text("SELECT count(*) FROM _emdash_media_usage_work")).scalar_one()
            peer.execute("BEGIN IMMEDIATE")  # not locked out by the reader
            peer.execute("ROLLBACK")
        with conn.begin():  # the held connection writes again: IMMEDIATE from the start
            conn.execute(sa.text("SELECT count(*) FROM _emdash_media_usage_work")).scalar_one()
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                peer.execute("BEGIN IMMEDIATE")
    peer.close()


def test_a_connection_in_a_transaction_is_joined_not_committed(db) -> None:
    """``transaction`` and ``read_transaction`` join the transaction a connection is already
    in: its reads see the caller's own writes, and the caller's rollback undoes theirs."""
    from media_usage_worker.repository.base.db import transaction
    from media_usage_worker.repository.registry.collections import find_collection

    with db.connect() as conn:
        outer = conn.begin()
        conn.execute(
            sa.text("INSERT INTO _emdash_collections (id, slug, label) VALUES ('c1', 'x', 'X')")
        )
        with transaction(conn) as joined:
            assert joined is conn and conn.in_transaction()
            joined.execute(sa.text("UPDATE _emdash_collections SET label = 'Y' WHERE id = 'c1'"))
        found = find_collection(conn, "x")  # a read in the same, still open, transaction
        assert found is not None and found.label == "Y"
        assert conn.in_transaction()  # the joined call committed nothing of its own
        outer.rollback()
    assert find_collection(db, "x") is None
