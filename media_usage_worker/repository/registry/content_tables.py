"""Per-collection ``ec_<slug>`` content tables, shaped as emdash 0.34.0 creates them (design §1).

Slugs reach this module already validated by ``domain.content_model``; names are still built
only from those validated slugs, never from anything else.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Column, Index, Table, Text

from media_usage_worker.domain.content_model import (
    EMPTY_DEFAULT_BY_COLUMN_TYPE,
    STANDARD_CONTENT_COLUMNS,
    FieldDefinition,
)
from media_usage_worker.domain.host_sources import Scope
from media_usage_worker.repository.base.clock import db_legacy_now
from media_usage_worker.repository.base.db import Bind, read_transaction
from media_usage_worker.repository.base.schema import revisions
from media_usage_worker.repository.base.stored_text import StoredText

POSTGRES_MAX_IDENTIFIER = 63

_COLUMN_TYPES: dict[str, type[sa.types.TypeEngine[Any]]] = {
    "TEXT": sa.Text,
    "REAL": sa.REAL,
    "INTEGER": sa.Integer,
    "JSON": sa.JSON,
}


def content_table_name(collection_slug: str) -> str:
    return f"ec_{collection_slug}"


def content_columns(slug: str, columns: Sequence[str] = ("id",)) -> sa.TableClause:
    """A lightweight handle on ``ec_<slug>`` naming only ``columns`` (quoted by SQLAlchemy).

    ``id`` is ``StoredText``: a host's id that is not UTF-8 is still matched exactly.
    """
    return sa.table(
        content_table_name(slug),
        *(sa.column(name, StoredText if name == "id" else None) for name in columns),
    )


def scope_columns(slug: str, columns: Sequence[str] = ("id",)) -> sa.FromClause:
    """``content_columns`` of a collection or of a source beyond content, by its scope key.

    A source's table is read as if it were a content table: its key column is ``id``, and a
    standard content column it does not have (no source column takes such a name) is NULL.
    """
    named = Scope.of(slug)
    if named.is_content:
        return content_columns(slug, columns)
    standard = set(STANDARD_CONTENT_COLUMNS)
    table = sa.table(
        named.table,
        sa.column(named.key_column, StoredText),
        *(sa.column(n) for n in dict.fromkeys(columns) if n not in standard),
    )
    selected = [
        table.c[named.key_column].label("id")
        if name == "id"
        else (sa.null().label(name) if name in standard else table.c[name])
        for name in dict.fromkeys(columns)
    ]
    return sa.select(*selected).subquery(named.table)


def ids_in_key_range(
    bind: Bind, slug: str, after: str | None, last: str, limit: int | None = None
) -> list[str]:
    """A scope's ids in ``(after, last]``, in key order: the one order a reconciliation's scan
    pages ids in and its key ranges are read in, so every id falls in exactly one range."""
    table = scope_columns(slug)
    query = sa.select(table.c.id).where(table.c.id <= last)
    if after is not None:
        query = query.where(table.c.id > after)
    with read_transaction(bind) as conn:
        return list(conn.execute(query.order_by(table.c.id).limit(limit)).scalars())


def scope_table_name(slug: str) -> str:
    """The table a collection's or a source's rows live in."""
    scope = Scope.of(slug)
    return content_table_name(slug) if scope.is_content else scope.table


def identifier(name: str, dialect_name: str) -> str:
    """The name as the engine stores it: PostgreSQL keeps the first 63 bytes of a long name."""
    return name[:POSTGRES_MAX_IDENTIFIER] if dialect_name == "postgresql" else name


def field_column(definition: FieldDefinition) -> Column[Any]:
    column_type = definition.column_type
    if definition.required:
        empty = EMPTY_DEFAULT_BY_COLUMN_TYPE[column_type]
        return Column(
            definition.slug,
            _COLUMN_TYPES[column_type](),
            nullable=False,
            server_default=sa.text(empty),
        )
    return Column(definition.slug, _COLUMN_TYPES[column_type]())


def content_table(
    collection_slug: str, fields: Iterable[FieldDefinition], dialect_name: str
) -> Table:
    """A standalone ``Table`` for ``ec_<slug>`` with its standard columns, fields and indexes."""
    name = content_table_name(collection_slug)

    def idx(suffix: str) -> str:
        return identifier(f"idx_{name}_{suffix}", dialect_name)

    metadata = sa.MetaData()
    revisions.to_metadata(metadata)  # for the revision foreign keys
    table = Table(
        name,
        metadata,
        Column("id", Text, primary_key=True, nullable=True),
        Column("slug", Text),
        Column("status", Text, server_default=sa.text("'draft'")),
        Column("author_id", Text),
        Column("primary_byline_id", Text),
        Column("created_at", Text, server_default=db_legacy_now()),
        Column("updated_at", Text, server_default=db_legacy_now()),
        Column("published_at", Text),
        Column("scheduled_at", Text),
        Column("deleted_at", Text),
        Column("version", sa.Integer, server_default=sa.text("1")),
        Column("live_revision_id", Text, sa.ForeignKey("revisions.id")),
        Column("draft_revision_id", Text, sa.ForeignKey("revisions.id")),
        Column("locale", Text, nullable=False, server_default=sa.text("'en'")),
        Column("translation_group", Text),
        *(field_column(definition) for definition in fields),
        sa.UniqueConstraint(
            "slug", "locale", name=identifier(f"{name}_slug_locale_unique", dialect_name)
        ),
    )
    c = table.c
    scheduled = c.scheduled_at.isnot(None)
    # Each Index over the table's columns attaches itself to the table.
    Index(idx("slug"), c.slug)
    Index(idx("scheduled"), c.scheduled_at, sqlite_where=scheduled, postgresql_where=scheduled)
    Index(idx("live_revision"), c.live_revision_id)
    Index(idx("draft_revision"), c.draft_revision_id)
    Index(idx("author"), c.author_id)
    Index(idx("primary_byline"), c.primary_byline_id)
    Index(idx("locale"), c.locale)
    Index(idx("tg_locale"), c.translation_group, c.locale)
    Index(idx("del_tg_locale"), c.deleted_at, c.translation_group, c.locale)
    Index(idx("deleted_updated_id"), c.deleted_at, c.updated_at.desc(), c.id.desc())
    Index(idx("deleted_status"), c.deleted_at, c.status)
    Index(idx("deleted_created_id"), c.deleted_at, c.created_at.desc(), c.id.desc())
    Index(idx("deleted_published_id"), c.deleted_at, c.published_at.desc(), c.id.desc())
    Index(idx("loc_upd"), c.deleted_at, c.locale, c.updated_at.desc(), c.id.desc())
    Index(idx("loc_crt"), c.deleted_at, c.locale, c.created_at.desc(), c.id.desc())
    return table


def create_content_table(
    conn: sa.Connection, collection_slug: str, fields: Iterable[FieldDefinition]
) -> Table:
    """Create ``ec_<slug>`` with emdash's index names, unless another table has one already.

    emdash's names are not unique across slugs: ``foo``'s ``tg_locale`` index and ``foo_tg``'s
    ``locale`` index are both ``idx_ec_foo_tg_locale``. A name already in the catalog gets
    this slug's hash instead, so the second collection is created rather than refused.
    """
    dialect_name = conn.dialect.name
    table = content_table(collection_slug, fields, dialect_name)
    named: list[Index | sa.UniqueConstraint] = [*table.indexes]
    named += [c for c in table.constraints if isinstance(c, sa.UniqueConstraint)]
    taken = _names_in_catalog(conn, [str(item.name) for item in named])
    for item in named:
        if item.name in taken:
            item.name = _distinct_name(str(item.name), collection_slug, dialect_name)
    table.create(conn)
    return table


def _distinct_name(name: str, slug: str, dialect_name: str) -> str:
    digest = hashlib.sha256(slug.encode()).hexdigest()[:8]
    return identifier(f"{name[: POSTGRES_MAX_IDENTIFIER - 9]}_{digest}", dialect_name)


def _names_in_catalog(conn: sa.Connection, names: list[str]) -> set[str]:
    """Which of ``names`` some relation in the schema already has (indexes share the space)."""
    if conn.dialect.name == "postgresql":
        query = sa.text(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relname IN :names"
        )
    else:
        query = sa.text("SELECT name FROM sqlite_master WHERE name IN :names")
    query = query.bindparams(sa.bindparam("names", expanding=True))
    return set(conn.execute(query, {"names": names}).scalars())


def add_field_column(
    conn: sa.Connection, collection_slug: str, definition: FieldDefinition
) -> None:
    column = field_column(definition)
    table = content_table_name(collection_slug)
    ddl_type = definition.column_type  # emdash writes ALTER types upper-case (TEXT, REAL, ...)
    preparer = conn.dialect.identifier_preparer
    clause = (
        f"ALTER TABLE {preparer.quote(table)} ADD COLUMN {preparer.quote(column.name)} {ddl_type}"
    )
    if definition.required:
        clause += f" NOT NULL DEFAULT {EMPTY_DEFAULT_BY_COLUMN_TYPE[ddl_type]}"
    conn.exec_driver_sql(clause)
