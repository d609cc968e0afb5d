"""Many rows as one bound parameter: a JSON array that a statement reads as a table.

A statement over a batch (claim these 50 versions, promote these 60 sources) is then one
statement whose text does not depend on the batch's size: it is built once per shape, and the
server sees the same text every time (psycopg prepares a statement it sees repeatedly). Each
row's guards still apply to that row alone, so a row that lost its compare-and-set is simply
not in the result.

Each element of the array is a list of the row's values in column order. PostgreSQL reads it
with ``jsonb_array_elements`` and casts each value to its column's type; SQLite reads it with
``json_each`` and ``json_extract``, which return integers and text as they are.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from media_usage_worker.domain.errors import InvalidArgument
from media_usage_worker.domain.validation import encodes_as_utf8


@dataclass(frozen=True)
class RowSet:
    """Rows of ``columns`` (name, type) bound as the parameter ``name``."""

    name: str
    columns: tuple[tuple[str, sa.types.TypeEngine[Any]], ...]

    def table(self, dialect: str) -> sa.Subquery:
        """The rows as a subquery whose columns are named and typed as ``columns``."""
        param = sa.bindparam(self.name, type_=sa.Text)
        if dialect == "postgresql":
            elements = sa.func.jsonb_array_elements(sa.cast(param, postgresql.JSONB))
            value = elements.table_valued("value").alias(f"{self.name}_elements").c.value
            selected = [
                _pg_element(value, index, type_).label(name)
                for index, (name, type_) in enumerate(self.columns)
            ]
        else:
            each = sa.func.json_each(param).table_valued("value")
            value = each.alias(f"{self.name}_elements").c.value
            selected = [
                _sqlite_element(value, index, type_).label(name)
                for index, (name, type_) in enumerate(self.columns)
            ]
        return sa.select(*selected).subquery(self.name)

    def contains(
        self, dialect: str, column: sa.ColumnElement[Any], name: str
    ) -> sa.ColumnElement[bool]:
        """``column`` is one of the rows' ``name`` values, found by one index lookup per value.

        ``column IN (SELECT …)`` lets PostgreSQL hash-join the rows against a scan of every row
        the rest of the condition allows (a whole collection's pending work, when statistics
        lag behind a large enqueue); ``= ANY(array)`` is a lookup per value on any index that
        starts with ``column`` (or with the columns the statement fixes before it).
        """
        selected = self.table(dialect).c[name]
        if dialect == "postgresql":
            values = sa.select(sa.func.array_agg(selected)).scalar_subquery()
            # The cast makes the subquery one array value, not a set of rows to compare with.
            type_ = dict(self.columns)[name]
            return column == sa.any_(sa.cast(values, postgresql.ARRAY(type_)))
        return column.in_(sa.select(selected))

    def bind(self, rows: Iterable[Sequence[Any]]) -> dict[str, str]:
        """The parameter for ``rows``, each a sequence of values in column order."""
        values = [list(row) for row in rows]
        width = len(self.columns)
        for row in values:
            if len(row) != width or not all(_encodable(v) for v in row):
                raise InvalidArgument(f"A row of {self.name} must be {width} JSON scalars.")
        return {self.name: json.dumps(values, ensure_ascii=False)}


def _pg_element(value: Any, index: int, type_: sa.types.TypeEngine[Any]) -> Any:
    # ``->>`` gives the element as text (NULL for a JSON null); the index is our own constant.
    text = value.op("->>")(sa.literal_column(str(index)))
    return text if isinstance(type_, sa.Text) else sa.cast(text, type_)


def _sqlite_element(value: Any, index: int, type_: sa.types.TypeEngine[Any]) -> Any:
    # ``json_extract`` returns integers and text as stored: no cast, only the column's type.
    path: sa.ColumnElement[str] = sa.literal_column(f"'$[{index}]'")
    return sa.type_coerce(sa.func.json_extract(value, path), type_)


def _encodable(value: object) -> bool:
    if isinstance(value, str):
        return encodes_as_utf8(value)
    return value is None or (isinstance(value, int) and not isinstance(value, bool))
