"""Text that may not be valid UTF-8: read it, and bind it back exactly as it is stored.

SQLite does not check that TEXT is UTF-8, so a host can store an id such as
``CAST(x'ff' AS TEXT)``. With pysqlite's default decoder, reading that row fails, and it fails
for the whole statement: one bad id would stop every tick in every collection. Our SQLite
connections therefore decode text with ``surrogateescape`` (``repository.db``). An undecodable
byte becomes a lone surrogate, and ``domain.validation`` refuses lone surrogates as ids, so such
a value can never reach a message or an index row.

To settle the work of such a row, the value still has to go back into a statement.
``StoredText`` binds a surrogate-escaped string as the original bytes, cast to TEXT, so
``content_id = ?`` matches the stored value byte for byte. PostgreSQL checks the encoding on
input, so it never holds such a value; there the type is plain ``TEXT``.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement

from media_usage_worker.domain.validation import encodes_as_utf8


def decode_text(raw: bytes) -> str:
    """pysqlite's ``text_factory``: strict UTF-8 where it is valid, escaped bytes where not."""
    return raw.decode("utf-8", "surrogateescape")


class _AsStoredText(ColumnElement[str]):
    """``CAST(<bind> AS TEXT)`` on SQLite, where the bind may be bytes; the bind elsewhere."""

    inherit_cache = True

    def __init__(self, bind: ColumnElement[Any]) -> None:
        self.bind = bind
        self.type = sa.Text()


@compiles(_AsStoredText)
def _plain(element: _AsStoredText, compiler: SQLCompiler, **kw: Any) -> str:
    return compiler.process(element.bind, **kw)


@compiles(_AsStoredText, "sqlite")
def _cast_on_sqlite(element: _AsStoredText, compiler: SQLCompiler, **kw: Any) -> str:
    return f"CAST({compiler.process(element.bind, **kw)} AS TEXT)"


class StoredText(sa.types.TypeDecorator[str]):
    """A TEXT column whose values are bound back exactly as they were read (see above)."""

    impl = sa.Text
    cache_ok = True

    def bind_expression(self, bindvalue: Any) -> ColumnElement[str]:
        return _AsStoredText(bindvalue)

    def process_bind_param(self, value: Any, dialect: sa.Dialect) -> Any:
        if dialect.name == "sqlite" and isinstance(value, str) and not encodes_as_utf8(value):
            return value.encode("utf-8", "surrogateescape")
        return value
