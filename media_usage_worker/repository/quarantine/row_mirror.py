"""The quarantine keeps a library row whole: every column the host's ``media`` table has, the
host's own additions included, so a restore puts back exactly what was retired.

Before a retirement the quarantine is given each column of ``media`` it lacks, with the same
declared type; the move then copies every column the two share. Names and types come from the
database's catalog and are still treated as untrusted: a name is quoted by the dialect, and a
type is used only when it reads as a plain type name.
"""

from __future__ import annotations

import re

import sqlalchemy as sa

from media_usage_worker.repository.base.schema import media, quarantine

# What a column's type may look like to be copied as it is: ``integer``, ``character
# varying(20)``, ``numeric(10,2)``, ``"MyEnum"``, ``timestamp with time zone``.
_TYPE_TEXT = re.compile(r'[A-Za-z_][A-Za-z0-9_ ,()."\[\]]{0,99}')


def _declared_columns(conn: sa.Connection, table: str) -> dict[str, str]:
    """Column name → declared type text, from the catalog, in the table's order."""
    if conn.dialect.name == "postgresql":
        rows = conn.execute(
            sa.text(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = to_regclass(:t) AND attnum > 0 AND NOT attisdropped "
                "ORDER BY attnum"
            ),
            {"t": table},
        )
        return {name: kind for name, kind in rows}
    quoted = conn.dialect.identifier_preparer.quote(table)
    return {row[1]: row[2] or "" for row in conn.exec_driver_sql(f"PRAGMA table_info({quoted})")}


def mirror_library_columns(engine: sa.Engine) -> None:
    """Give the quarantine every column of ``media`` it lacks (own transaction, before a
    batch). Two retirements racing to add the same column: the second finds it there."""
    with engine.begin() as conn:
        missing = _missing(conn)
    for name, kind in missing.items():
        quoted = engine.dialect.identifier_preparer.quote(name)
        declared = kind if _TYPE_TEXT.fullmatch(kind) else ""
        try:
            with engine.begin() as conn:
                if name in _missing(conn):
                    conn.exec_driver_sql(
                        f"ALTER TABLE {quarantine.name} ADD COLUMN {quoted} {declared}".rstrip()
                    )
        except sa.exc.DBAPIError:
            with engine.begin() as conn:
                if name in _missing(conn):
                    raise


def _missing(conn: sa.Connection) -> dict[str, str]:
    kept = _declared_columns(conn, quarantine.name)
    return {n: k for n, k in _declared_columns(conn, media.name).items() if n not in kept}


def shared_columns(conn: sa.Connection) -> list[str]:
    """The columns a move copies: every column of ``media`` the quarantine also has."""
    kept = _declared_columns(conn, quarantine.name)
    return [name for name in _declared_columns(conn, media.name) if name in kept]
