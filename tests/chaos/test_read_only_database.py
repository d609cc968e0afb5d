"""A database that turns read-only under a running worker, then writable again: the worker
recovers by itself, with no restart, and the index ends exact.

SQLite: the test makes the database directory and files read-only (the worker runs without
``CAP_DAC_OVERRIDE``, so file modes bind as for any user) and kills the pool children, whose
replacements open their connections while the file is read-only; SQLite keeps such a
connection read-only for good. PostgreSQL: ``default_transaction_read_only`` on the database,
as a standby or a read-only switch would; the replacements' sessions refuse writes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa

from media_usage_worker.pipeline.capture import activate
from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.sample_content import create_sample_collections
from tests.chaos.pipeline import quiet
from tests.index_oracle import actual_index, expected_index
from tests.processes import Processes, wait_for, work_rows
from tests.support import WITHOUT_FILE_OVERRIDE

ENTRIES = 200
READ_ONLY_ERRORS = {
    "sqlite": "attempt to write a readonly database",
    "postgresql": "read-only transaction",
}


def _set_sqlite_writable(directory: Path, writable: bool) -> None:
    directory.chmod(0o755 if writable else 0o555)
    for path in directory.glob("chaos.db*"):
        path.chmod(0o644 if writable else 0o444)


def _set_postgres_read_only(admin_url: str, read_only: bool) -> None:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(
            "ALTER DATABASE chaos SET default_transaction_read_only = on"
            if read_only
            else "ALTER DATABASE chaos RESET default_transaction_read_only"
        )
    admin.dispose()


def _kill_pool_children(worker: subprocess.Popen) -> int:
    children = subprocess.run(
        ["pgrep", "-P", str(worker.pid)], capture_output=True, text=True, check=False
    ).stdout.split()
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    return len(children)


@pytest.mark.timeout(600)
def test_a_database_read_only_for_a_while_is_recovered_without_a_restart(
    dialect: str, chaos_database, chaos_redis, fleet: Processes, tmp_path: Path
) -> None:
    url, postgres = chaos_database
    engine = create_engine(url)
    create_sample_collections(engine)
    activate(engine)
    worker = fleet.worker(concurrency=2, prefix=WITHOUT_FILE_OVERRIDE)
    fleet.beat()
    wait_for(lambda: quiet(engine), timeout=120, interval=0.5)

    # The host's session, opened while the database is writable: it keeps writing throughout
    # (on SQLite it also keeps the -wal and -shm files, so a read-only open succeeds).
    host = engine.connect()
    host.execute(sa.text("SELECT 1")).scalar_one()
    host.commit()
    if postgres is None:
        _set_sqlite_writable(tmp_path, False)
    else:
        _set_postgres_read_only(postgres.admin_url, True)
    try:
        assert _kill_pool_children(worker) > 0
        for i in range(ENTRIES):
            host.execute(
                sa.text("INSERT INTO ec_articles (id, hero) VALUES (:id, :hero)"),
                {"id": f"ro{i:04d}", "hero": f"m{i % 7}"},
            )
        host.commit()
        marker = READ_ONLY_ERRORS[dialect]
        wait_for(lambda: fleet.logs().count(marker) >= 10, timeout=120, interval=0.5)
    finally:
        if postgres is None:
            _set_sqlite_writable(tmp_path, True)
        else:
            _set_postgres_read_only(postgres.admin_url, False)
        host.close()
    errors_while_read_only = fleet.logs().count(READ_ONLY_ERRORS[dialect])

    wait_for(lambda: work_rows(engine) == 0 and quiet(engine), timeout=180, interval=0.5)
    logs = fleet.logs()
    figures = {
        "dialect": dialect,
        "entries": ENTRIES,
        "errors_while_read_only": errors_while_read_only,
        "errors_after": logs.count(READ_ONLY_ERRORS[dialect]) - errors_while_read_only,
        "children_replaced": logs.count("exited with"),
    }
    print("read-only figures:", json.dumps(figures))
    assert worker.poll() is None, "the worker exited"
    assert "Unrecoverable error" not in logs
    assert "SIGBUS" not in logs  # only the children the test killed itself were replaced
    assert logs.count("exited with") == logs.count("exited with 'signal 9 (SIGKILL)'")
    assert actual_index(engine) == expected_index(engine)
    engine.dispose()
