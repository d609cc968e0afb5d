"""A database that is read-only for a while: the failed connection is discarded, not kept.

SQLite opens a file that is read-only at that moment read-only for good, so a pooled connection
made then would fail every write after the file is writable again. PostgreSQL's equivalent is a
session on a server that refuses writes (a standby, or ``default_transaction_read_only``).
Root ignores file modes, so the SQLite side runs its engine in a child process without
``CAP_DAC_OVERRIDE`` (``setpriv``), which makes the modes bind as they would for any user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import sqlalchemy as sa

from media_usage_worker.repository.base.db import create_engine
from tests.support import WITHOUT_FILE_OVERRIDE

ROOT = Path(__file__).resolve().parents[2]

# The child: open the pool while the file is read-only, fail a write, wait for the parent to
# make the file writable, then write again through the same engine.
CHILD = textwrap.dedent(
    """
    import sys
    import sqlalchemy as sa
    from media_usage_worker.repository.base.db import create_engine

    engine = create_engine(sys.argv[1])
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT count(*) FROM t")).scalar_one()
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO t VALUES (1)"))
        print("first write: ok", flush=True)
    except sa.exc.DBAPIError as exc:
        print(f"first write: failed invalidated={exc.connection_invalidated}", flush=True)
    sys.stdin.readline()  # the parent made the file writable again
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO t VALUES (2)"))
    print("second write: ok", flush=True)
    """
)


def _set_writable(directory: Path, writable: bool) -> None:
    directory.chmod(0o755 if writable else 0o555)
    for path in directory.iterdir():
        path.chmod(0o644 if writable else 0o444)


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs util-linux setpriv")
def test_sqlite_connections_opened_read_only_are_replaced(tmp_path: Path) -> None:
    directory = tmp_path / "db"
    directory.mkdir()
    url = f"sqlite:///{directory / 'media_usage.db'}"
    host = create_engine(url)
    with host.begin() as conn:
        conn.execute(sa.text("CREATE TABLE t (n integer)"))
    # A host connection stays open, so the -wal and -shm files exist and SQLite can open the
    # database read-only (without them the child could not connect at all, and would retry).
    held = host.connect()
    held.execute(sa.text("SELECT 1")).scalar_one()
    held.commit()
    _set_writable(directory, False)
    child = subprocess.Popen(
        [*WITHOUT_FILE_OVERRIDE, sys.executable, "-c", CHILD, url],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        first = child.stdout.readline().strip()
        _set_writable(directory, True)
        child.stdin.write("go\n")
        child.stdin.flush()
        second = child.stdout.readline().strip()
        child.wait(timeout=60)
    finally:
        _set_writable(directory, True)
        held.close()
        if child.poll() is None:
            child.kill()
    assert first == "first write: failed invalidated=True", child.stderr.read()  # type: ignore[union-attr]
    assert second == "second write: ok", child.stderr.read()  # type: ignore[union-attr]
    with host.connect() as conn:
        assert conn.execute(sa.text("SELECT n FROM t")).scalars().all() == [2]
    host.dispose()


def test_postgres_sessions_on_a_read_only_server_are_replaced(postgres_databases) -> None:
    name = postgres_databases.create()
    engine = create_engine(postgres_databases.url_for(name), pool_size=1, max_overflow=0)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE t (n integer)"))
        engine.dispose()
        with postgres_databases.admin.connect() as conn:
            conn.exec_driver_sql(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
        # The pool's one session is opened read-only.
        with pytest.raises(sa.exc.DBAPIError) as failed, engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO t VALUES (1)"))
        assert failed.value.connection_invalidated
        with postgres_databases.admin.connect() as conn:
            conn.exec_driver_sql(f"ALTER DATABASE {name} RESET default_transaction_read_only")
        with engine.begin() as conn:  # a new session, writable again
            conn.execute(sa.text("INSERT INTO t VALUES (2)"))
            assert conn.execute(sa.text("SELECT n FROM t")).scalars().all() == [2]
    finally:
        engine.dispose()
        postgres_databases.drop(name)
