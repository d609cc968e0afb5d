"""Planner statistics for the index tables, kept fresh by the project itself.

The read statements are shaped to seek the right index with or without statistics, but the
planner's choices between good plans (and the cost of ``usage_counts`` of a thousand ids) still
depend on them. PostgreSQL's autovacuum analyzes tables as they change, yet lags behind a
backfill that grows them from nothing; SQLite keeps no statistics until ``ANALYZE`` runs, and
its ``PRAGMA optimize`` only looks at the tables one connection used. So:

- ``refresh`` analyzes the index tables: after a migration and when a reconciliation run (a
  backfill) completes, on both dialects;
- ``refresh_if_grown`` (SQLite) analyzes them again when one has more than doubled since its
  statistics were taken; the reconcile tick calls it, so a site that only ever grows by
  incremental writes (the demo, say) gets statistics too.

On SQLite ``PRAGMA analysis_limit`` bounds the work (a sample per index), so an analysis of a
site of millions of occurrences costs milliseconds.
"""

from __future__ import annotations

import sqlalchemy as sa

from media_usage_worker.repository.base.db import Bind, read_transaction, transaction
from media_usage_worker.repository.base.schema import media, occurrences, sources, work

# The tables the read and work statements search by index.
TABLES = (sources, occurrences, work, media)
# Rows SQLite samples per index: enough for a good plan, bounded at any size.
SQLITE_ANALYSIS_LIMIT = 1000
# Statistics are stale once a table holds more than this times the rows they describe.
GROWTH_FACTOR = 2
# ... and at least this many more: a table of ten rows growing to thirty needs no analysis.
GROWTH_FLOOR = 1000


def refresh(bind: Bind) -> None:
    """Analyze every index table now."""
    with transaction(bind) as conn:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql(f"PRAGMA analysis_limit = {SQLITE_ANALYSIS_LIMIT}")
        present = set(sa.inspect(conn).get_table_names())
        for table in TABLES:
            if table.name in present:  # a migration to an older revision may lack some
                # Identifiers from this project's own schema, quoted by the dialect.
                quoted = conn.dialect.identifier_preparer.quote(table.name)
                conn.exec_driver_sql(f"ANALYZE {quoted}")


def refresh_if_grown(bind: Bind) -> bool:
    """On SQLite, ``refresh`` when an index table outgrew its statistics; ``True`` if it ran.
    On PostgreSQL autovacuum does this; nothing runs (no statement, not even a transaction:
    every reconcile tick calls this)."""
    if bind.dialect.name != "sqlite":
        return False
    with read_transaction(bind) as conn:
        described = _described_rows(conn)
        stale = [t.name for t in TABLES if _rows_now(conn, t) > _stale_above(described, t)]
    if stale:
        refresh(bind)
    return bool(stale)


def _described_rows(conn: sa.Connection) -> dict[str, int]:
    """Per table, the row count its statistics were taken at (none before the first ANALYZE)."""
    has_stats = conn.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_stat1'"
    ).first()
    if has_stats is None:
        return {}
    described: dict[str, int] = {}
    # The first number of an index's stat is the table's row count when it was analyzed.
    for table, stat in conn.exec_driver_sql("SELECT tbl, stat FROM sqlite_stat1"):
        first = (stat or "").split()[:1]
        if first and first[0].isdigit():
            described[table] = max(described.get(table, 0), int(first[0]))
    return described


def _stale_above(described: dict[str, int], table: sa.Table) -> int:
    return GROWTH_FACTOR * described.get(table.name, 0) + GROWTH_FLOOR


def _rows_now(conn: sa.Connection, table: sa.Table) -> int:
    # max(rowid) is one seek, where count(*) reads the whole table.
    rowid: sa.ColumnElement[int] = sa.literal_column("rowid")
    return int(
        conn.execute(
            sa.select(sa.func.coalesce(sa.func.max(rowid), 0)).select_from(table)
        ).scalar_one()
    )
