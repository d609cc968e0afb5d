"""create_engine against a real SQLite file and a real PostgreSQL server."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from media_usage_worker.repository.base.db import create_engine

INCREMENTS_PER_PROCESS = 150


def test_engine_connects_and_round_trips(engine: sa.Engine, dialect: str) -> None:
    assert engine.dialect.name == dialect
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE probe (id integer PRIMARY KEY, value text)"))
        conn.execute(sa.text("INSERT INTO probe (id, value) VALUES (:id, :v)"), {"id": 1, "v": "x"})
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT value FROM probe WHERE id = 1")).scalar_one() == "x"


def test_sqlite_engine_settings(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'settings.db'}")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one() >= 5000
    engine.dispose()


def test_postgres_engine_settings(postgres_databases) -> None:
    name = postgres_databases.create()
    try:
        engine = create_engine(postgres_databases.url_for(name))
        assert engine.pool._pre_ping is True
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW transaction_isolation").scalar_one() == (
                "read committed"
            )
            assert conn.exec_driver_sql("SHOW TimeZone").scalar_one() == "UTC"
        engine.dispose()
    finally:
        postgres_databases.drop(name)


def _read_then_write(url: str, barrier, errors) -> None:
    """Each transaction reads the counter, then writes it back plus one: the lock-upgrade case."""
    engine = create_engine(url)
    barrier.wait(timeout=30)
    try:
        for _ in range(INCREMENTS_PER_PROCESS):
            with engine.begin() as conn:
                value = conn.execute(sa.text("SELECT n FROM counter")).scalar_one()
                conn.execute(sa.text("UPDATE counter SET n = :n"), {"n": value + 1})
    except Exception as exc:  # reported to the parent, which asserts on it
        errors.put(repr(exc))
    finally:
        engine.dispose()


def test_two_sqlite_processes_take_the_write_lock_in_turn(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lock.db'}"
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE counter (n integer NOT NULL)"))
        conn.execute(sa.text("INSERT INTO counter (n) VALUES (0)"))
    ctx = multiprocessing.get_context("spawn")
    barrier, errors = ctx.Barrier(2), ctx.Queue()
    workers = [ctx.Process(target=_read_then_write, args=(url, barrier, errors)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    reported = [errors.get(timeout=1) for _ in range(errors.qsize())] if not errors.empty() else []
    assert reported == []
    with engine.connect() as conn:
        # No "database is locked" and no lost update: every increment landed.
        assert conn.execute(sa.text("SELECT n FROM counter")).scalar_one() == (
            2 * INCREMENTS_PER_PROCESS
        )
    engine.dispose()


def test_sqlite_transactions_take_the_write_lock_at_begin(tmp_path: Path) -> None:
    """A transaction that has only read still holds the write lock, so no upgrade can fail."""
    path = tmp_path / "immediate.db"
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE t (n integer)"))
    peer = sqlite3.connect(str(path), timeout=0, isolation_level=None)
    with engine.begin() as conn:
        conn.execute(sa.text("SELECT count(*) FROM t")).scalar_one()
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            peer.execute("BEGIN IMMEDIATE")
    peer.execute("BEGIN IMMEDIATE")  # released at commit
    peer.execute("ROLLBACK")
    peer.close()
    engine.dispose()
