"""What the purge's final sweep reads: every text-like column of every table the host owns,
streamed a page at a time (docs/design.md §13, "The final sweep").

The host's tables come from the catalog (content, revisions, options, users, bylines, declared
and undeclared tables alike); the project's own tables (the index, the work and coverage
tables, the quarantine, the audit, the migrations) are left out. Catalog names are untrusted:
each becomes SQL only quoted by the dialect, never pasted.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from media_usage_worker.repository.base.db import Bind, read_transaction
from media_usage_worker.repository.base.schema import media
from media_usage_worker.repository.migration.migrate import VERSION_TABLE

# Prefixes of the tables this project (and emdash's media-usage subsystem it ports) writes.
_OWN_PREFIXES = ("_emdash_media_usage", "_media_usage_worker_", "sqlite_")
_OWN_TABLES = frozenset({VERSION_TABLE})
# PostgreSQL types whose values can hold text: read cast to text.
_TEXT_TYPES = frozenset(
    {"text", "character varying", "character", "json", "jsonb", "xml", "ARRAY", "USER-DEFINED"}
)
PAGE_ROWS = 2000


@dataclass(frozen=True)
class SweptTable:
    name: str
    columns: tuple[str, ...]
    # The column whose value names a row in a report; None: the row's physical address.
    key: str | None


def is_own_table(name: str) -> bool:
    return name in _OWN_TABLES or name.startswith(_OWN_PREFIXES)


def host_tables(bind: Bind) -> list[SweptTable]:
    """Every table of the host with its text-like columns, by name."""
    with read_transaction(bind) as conn:
        inspector = sa.inspect(conn)
        found = []
        for name in sorted(inspector.get_table_names()):
            if is_own_table(name):
                continue
            columns = _text_columns(conn, inspector, name)
            if not columns:
                continue
            primary = inspector.get_pk_constraint(name).get("constrained_columns") or []
            found.append(SweptTable(name, tuple(columns), primary[0] if primary else None))
    return found


def _text_columns(conn: sa.Connection, inspector: sa.Inspector, table: str) -> list[str]:
    if conn.dialect.name != "postgresql":
        # SQLite stores any value in any column: every column may hold text.
        return [c["name"] for c in inspector.get_columns(table)]
    rows = conn.execute(
        sa.text(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = :t ORDER BY ordinal_position"
        ),
        {"t": table},
    )
    return [name for name, kind in rows if kind in _TEXT_TYPES]


def table_rows(
    bind: Bind, table: SweptTable, exclude_media_ids: Sequence[str] = ()
) -> Iterator[tuple[str, str, str, object]]:
    """(table, column, row key, value) of every non-NULL text-like value of ``table``, read
    with a server-side cursor a page at a time (memory bounded by a page). The media rows of
    ``exclude_media_ids`` are left out (a candidate's own row names its own key)."""
    postgres = bind.dialect.name == "postgresql"
    handle = sa.table(table.name, *(sa.column(c) for c in table.columns))
    if table.key is not None:
        key: sa.ColumnElement[str] = sa.cast(handle.c[table.key], sa.Text)
    else:
        key = sa.cast(sa.literal_column("ctid" if postgres else "rowid"), sa.Text)
    values = [sa.cast(handle.c[c], sa.Text) if postgres else handle.c[c] for c in table.columns]
    query = sa.select(key, *values).select_from(handle)
    if table.name == media.name and exclude_media_ids:
        query = query.where(handle.c.id.not_in(list(exclude_media_ids)))
    with read_transaction(bind) as conn:
        streamed = conn.execution_options(stream_results=True, yield_per=PAGE_ROWS)
        for row in streamed.execute(query):
            row_key = str(row[0])
            for column, value in zip(table.columns, row[1:], strict=True):
                if value is not None:
                    yield table.name, column, row_key, value
