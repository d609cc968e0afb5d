"""The registry of sources beyond content collections (``domain.host_sources``): built-in
ones and declared host tables, checked against the catalog before anything is stored.

Declaring or removing a source is one transaction: the registry row, its capture triggers,
its coverage row (reconciled from the start) and, on removal, every row of it in the index.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.errors import InvalidSource, SourceNotFound
from media_usage_worker.domain.host_sources import (
    BUILT_IN,
    BUILT_IN_TABLES,
    ColumnKind,
    HostSource,
    SourceKind,
    built_in_gap,
    checked_identifier,
)
from media_usage_worker.repository.base import schema
from media_usage_worker.repository.base.db import Bind, read_transaction, transaction

_h = schema.host_sources.c
# Column types a key may have: text, so a key is the work table's content id as it is.
_TEXT_TYPES = ("TEXT", "VARCHAR", "CHARACTER VARYING", "CHAR", "CHARACTER")


# Tables that hold no site's references of their own: the library itself, content (indexed as
# collections), the registry, and the index.
_NOT_SOURCES = frozenset(table.name for table in schema.CORE_TABLES)
_NOT_SOURCE_PREFIXES = ("ec_", "_emdash_media_usage", "_media_usage_worker")


def registry_row(source: HostSource) -> dict[str, Any]:
    return {
        "collection_id": source.collection_id,
        "scope_key": source.scope_key,
        "kind": source.kind.value,
        "table_name": source.table,
        "key_column": source.key_column,
        "columns": json.dumps([[name, kind.value] for name, kind in source.columns]),
    }


def _from_row(row: sa.Row[Any]) -> HostSource:
    # Checked again as it is read: its names become SQL, and anyone with write access to the
    # database could have edited the row.
    return HostSource(
        SourceKind(row.kind),
        row.table_name,
        row.key_column,
        tuple((name, ColumnKind(kind)) for name, kind in json.loads(row.columns)),
    ).validated()


def find_source(conn: sa.Connection, collection_id: str) -> HostSource | None:
    row = conn.execute(
        sa.select(schema.host_sources).where(_h.collection_id == collection_id)
    ).first()
    return None if row is None else _from_row(row)


def list_sources(bind: Bind) -> list[HostSource]:
    """Every registered source, in table order (in the caller's transaction when it is in
    one)."""
    with read_transaction(bind) as conn:
        rows = conn.execute(sa.select(schema.host_sources).order_by(_h.table_name)).all()
    return [_from_row(row) for row in rows]


# The earlier name of ``list_sources`` on a connection, still importable.
all_sources = list_sources


def check_against_catalog(conn: sa.Connection, source: HostSource) -> None:
    """The table exists with every named column, and its key column is a text key (the
    primary key, or unique and NOT NULL); raises ``InvalidSource`` saying what is wrong."""
    source.validated()
    inspector = sa.inspect(conn)
    if not inspector.has_table(source.table):
        raise InvalidSource(f"Table {source.table!r} does not exist.")
    columns = {c["name"]: c for c in inspector.get_columns(source.table)}
    for name in (source.key_column, *(n for n, _ in source.columns)):
        if name not in columns:
            raise InvalidSource(f"Table {source.table!r} has no column {name!r}.")
    key = columns[source.key_column]
    type_name = str(key["type"]).split("(")[0].upper()
    if type_name not in _TEXT_TYPES:
        # SQLite lets a column have no declared type at all (reflected as NULL).
        shown = "declared with no type" if type_name in ("NULL", "") else f"of type {type_name}"
        raise InvalidSource(
            f"Key column {source.key_column!r} of {source.table!r} is {shown}, not text: "
            "a source's rows are named by a text key."
        )
    primary = inspector.get_pk_constraint(source.table).get("constrained_columns") or []
    unique = [list(u["column_names"]) for u in inspector.get_unique_constraints(source.table)]
    unique += [
        [str(n) for n in i["column_names"]]
        for i in inspector.get_indexes(source.table)
        if i["unique"]
    ]
    is_key = primary == [source.key_column] or (
        [source.key_column] in unique and not key["nullable"]
    )
    if not is_key:
        raise InvalidSource(
            f"Column {source.key_column!r} is not a key of {source.table!r}: it must be the "
            "primary key, or unique and NOT NULL."
        )


# The columns of some tables in one statement (a table that is missing has none): the checks
# of the built-in sources run on every coverage read.
_CATALOG_COLUMNS = {
    "postgresql": sa.text(
        "SELECT c.relname, a.attname FROM pg_attribute a "
        "JOIN pg_class c ON c.oid = a.attrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') "
        "AND a.attnum > 0 AND NOT a.attisdropped AND c.relname IN :names"
    ).bindparams(sa.bindparam("names", expanding=True)),
    "sqlite": sa.text(
        "SELECT m.name, p.name FROM sqlite_master AS m JOIN pragma_table_info(m.name) AS p "
        "WHERE m.type = 'table' AND m.name IN :names"
    ).bindparams(sa.bindparam("names", expanding=True)),
}


def catalog_columns(conn: sa.Connection, tables: Collection[str]) -> dict[str, set[str]]:
    """The columns each of ``tables`` has, by table; a table not in the database is absent."""
    found: dict[str, set[str]] = {}
    query = _CATALOG_COLUMNS[conn.dialect.name]
    for table, column in conn.execute(query, {"names": sorted(tables)}):
        found.setdefault(table, set()).add(column)
    return found


def built_in_readings(
    conn: sa.Connection, sources: Sequence[HostSource] | None = None
) -> list[tuple[HostSource, set[str] | None, HostSource | None]]:
    """Each built-in source's shape (``BUILT_IN``) with the columns its table has now (``None``:
    no such table) and the source as it is registered (``None``: it is not). ``sources``: the
    registered sources, when the caller has read them."""
    present = catalog_columns(conn, BUILT_IN_TABLES)
    known = list_sources(conn) if sources is None else sources
    registered: dict[SourceKind, HostSource] = {
        s.kind: s for s in known if s.kind != SourceKind.TABLE
    }
    return [(shape, present.get(shape.table), registered.get(shape.kind)) for shape in BUILT_IN]


def built_in_gaps(
    conn: sa.Connection, sources: Sequence[HostSource] | None = None
) -> dict[HostSource, str]:
    """The built-in sources not indexed as their tables are now, each with the reason (by its
    shape in ``BUILT_IN``); empty when every one is (``domain.host_sources.built_in_gap``)."""
    gaps = {}
    for shape, columns, registered in built_in_readings(conn, sources):
        gap = built_in_gap(shape, columns, registered)
        if gap is not None:
            gaps[shape] = gap
    return gaps


def check_declarable(conn: sa.Connection, source: HostSource) -> None:
    """A declared source: a table no other source or collection already covers."""
    if source.kind != SourceKind.TABLE:
        raise InvalidSource("Only a host table is declared; the built-in sources are fixed.")
    if source.table in BUILT_IN_TABLES:
        raise InvalidSource(f"Table {source.table!r} is a built-in source already.")
    if source.table in _NOT_SOURCES or source.table.startswith(_NOT_SOURCE_PREFIXES):
        raise InvalidSource(
            f"Table {source.table!r} is the media library, a content table, the content "
            "registry or this project's own; it cannot be declared as a source."
        )
    taken = conn.execute(sa.select(1).where(_h.table_name == source.table)).first()
    if taken is not None:
        raise InvalidSource(f"Table {source.table!r} is declared already.")
    check_against_catalog(conn, source)


def insert_source(conn: sa.Connection, source: HostSource) -> None:
    conn.execute(schema.host_sources.insert().values(**registry_row(source)))


def delete_index_of(conn: sa.Connection, collection_id: str) -> None:
    """Every row the index and the work path hold for one source, gone."""
    keys = sa.select(schema.sources.c.source_key).where(
        schema.sources.c.collection_id == collection_id
    )
    conn.execute(schema.occurrences.delete().where(schema.occurrences.c.source_key.in_(keys)))
    conn.execute(schema.sources.delete().where(schema.sources.c.collection_id == collection_id))
    # Coordinators before their ranges (see ``activation.drop_all_work``).
    tables = (schema.work, schema.reconciliations, schema.backfill_ranges, schema.rules_state)
    for table in tables:
        conn.execute(table.delete().where(table.c.collection_id == collection_id))
    conn.execute(
        schema.reference_paths.delete().where(
            schema.reference_paths.c.collection_id == collection_id
        )
    )
    conn.execute(
        schema.index_status.delete().where(
            schema.index_status.c.adapter_id == schema.ADAPTER_ID,
            schema.index_status.c.scope_type == schema.SCOPE_TYPE,
            schema.index_status.c.collection_id == collection_id,
        )
    )
    conn.execute(schema.host_sources.delete().where(_h.collection_id == collection_id))


def require_declared(conn: sa.Connection, table: str) -> HostSource:
    checked_identifier(table, "Table")
    row = conn.execute(
        sa.select(schema.host_sources).where(
            _h.table_name == table, _h.kind == SourceKind.TABLE.value
        )
    ).first()
    if row is None:
        raise SourceNotFound(f"No declared source over table {table!r}.")
    return _from_row(row)


# Every scope the index covers, as one relation of ``id`` and ``slug``: the collections, and
# the sources beyond content (their scope key where a collection has its slug). The read side
# joins sources to this where it once joined the collections' registry.
SCOPES = sa.union_all(
    sa.select(schema.collections.c.id.label("id"), schema.collections.c.slug.label("slug")),
    sa.select(_h.collection_id.label("id"), _h.scope_key.label("slug")),
).subquery("scopes")


def list_with_coverage(bind: Bind) -> list[tuple[HostSource, str | None, list[str]]]:
    """Every source with its coverage status (``None``: no coverage row) and declared paths."""
    st, rp = schema.index_status.c, schema.reference_paths.c
    with transaction(bind) as conn:
        rows = conn.execute(
            sa.select(schema.host_sources, st.status)
            .select_from(
                schema.host_sources.outerjoin(
                    schema.index_status,
                    sa.and_(
                        st.adapter_id == schema.ADAPTER_ID,
                        st.scope_type == schema.SCOPE_TYPE,
                        st.collection_id == _h.collection_id,
                    ),
                )
            )
            .order_by(_h.table_name)
        ).all()
        paths: dict[str, list[str]] = {}
        for collection_id, path in conn.execute(
            sa.select(rp.collection_id, rp.path)
            .where(rp.collection_id.in_([row.collection_id for row in rows]))
            .order_by(rp.path)
        ):
            paths.setdefault(collection_id, []).append(path)
    return [(_from_row(row), row.status, paths.get(row.collection_id, [])) for row in rows]
