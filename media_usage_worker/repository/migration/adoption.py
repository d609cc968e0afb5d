"""Adopting the media usage tables a CMS already has (docs/operations.md, "Running on an
existing emdash site").

emdash creates its media usage tables itself, and its older versions (0.32) create them without
the columns and indexes incremental capture needs. Migrations create missing tables only, so
``db upgrade`` also compares every existing media usage table with this project's schema and
adds what is missing: columns (each with its default, so existing rows stay valid) and
indexes. Nothing is dropped or rewritten. A column that exists with another type of value is
``CannotAdopt`` before anything changes. emdash's other tables (collections, fields, media,
users, ...) are read as they are and never altered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations

from media_usage_worker.domain.errors import CannotAdopt
from media_usage_worker.repository.base.schema import metadata

# The tables adopted: the media usage subsystem's own, emdash's and this project's.
ADOPTED_PREFIXES = ("_emdash_media_usage", "_media_usage_worker_")
_NUMBERS = (sa.Integer, sa.BigInteger, sa.SmallInteger, sa.Numeric, sa.Boolean)
_TEXTS = (sa.String, sa.Text)


@dataclass(frozen=True)
class TableAdoption:
    """What ``db upgrade`` adds to one existing table."""

    table: str
    columns: tuple[str, ...]
    indexes: tuple[str, ...]

    def shown(self) -> str:
        parts = []
        if self.columns:
            parts.append(f"{len(self.columns)} column(s) ({', '.join(self.columns)})")
        if self.indexes:
            parts.append(f"{len(self.indexes)} index(es) ({', '.join(self.indexes)})")
        return f"{self.table}: adds {' and '.join(parts)}"


def _kind(column_type: sa.types.TypeEngine[object]) -> str:
    if isinstance(column_type, sa.types.TypeDecorator):
        column_type = column_type.impl_instance
    if isinstance(column_type, _NUMBERS):
        return "number"
    if isinstance(column_type, _TEXTS):
        return "text"
    return type(column_type).__name__.lower()


def adoption_plan(conn: sa.Connection) -> list[TableAdoption]:
    """What every existing media usage table lacks; ``CannotAdopt`` for a column of another
    kind (text where a number is needed, or the reverse)."""
    inspector = sa.inspect(conn)
    present = set(inspector.get_table_names())
    plan = []
    for table in metadata.sorted_tables:
        if not table.name.startswith(ADOPTED_PREFIXES) or table.name not in present:
            continue
        found = {c["name"]: c["type"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            have = found.get(column.name)
            if (
                have is not None
                and _kind(have) != _kind(column.type)
                and not isinstance(have, sa.types.NullType)
            ):
                raise CannotAdopt(
                    f"Table {table.name}: column {column.name} holds {_kind(have)} values "
                    f"({have}), this project needs {_kind(column.type)}; nothing was changed."
                )
        indexes = {i["name"] for i in inspector.get_indexes(table.name)}
        missing_columns = tuple(c.name for c in table.columns if c.name not in found)
        for name in missing_columns:
            column = table.c[name]
            if not column.nullable and column.server_default is None:
                raise CannotAdopt(
                    f"Table {table.name} lacks column {name}, which has no default to give "
                    "its existing rows; nothing was changed."
                )
        missing_indexes = tuple(
            sorted(i.name for i in table.indexes if i.name is not None and i.name not in indexes)
        )
        if missing_columns or missing_indexes:
            plan.append(TableAdoption(table.name, missing_columns, missing_indexes))
    return plan


def adopt(conn: sa.Connection, plan: Sequence[TableAdoption]) -> None:
    """Add what ``plan`` names, in the caller's transaction."""
    operations = Operations(MigrationContext.configure(conn))
    for change in plan:
        table = metadata.tables[change.table]
        for name in change.columns:
            column = table.c[name]
            default = column.server_default
            arg = default.arg if isinstance(default, sa.DefaultClause) else None
            text = arg if isinstance(arg, str | sa.TextClause) else None
            operations.add_column(
                table.name,
                sa.Column(name, column.type, nullable=column.nullable, server_default=text),
            )
        for index in table.indexes:
            if index.name in change.indexes:
                index.create(conn)
