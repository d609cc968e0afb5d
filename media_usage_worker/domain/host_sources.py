"""Sources of media references outside content collections: site settings, user and byline
avatars, and any host table an operator declares (docs/design.md, "Sources beyond content").

Each source is indexed as a collection of its own, so it goes through everything a
collection does (capture, work, leases, fences, reconciliation, coverage, reads). Its identity
cannot be mistaken for a collection's: the id starts with ``source-`` (emdash's ids are ULIDs)
and the scope key, stored where a collection's slug is, holds ``:`` (no collection slug can).
The scope key names the source's kind, table and key column, so a statement over the source's
table is built from the identity alone.

Pure: what a source is and how its identity reads; ``repository.host_sources`` stores them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from media_usage_worker.domain.content_model import STANDARD_CONTENT_COLUMNS, FieldDefinition
from media_usage_worker.domain.errors import InvalidSource

ID_PREFIX = "source-"
# A table or column a source names: unquoted lower-case SQL identifiers that both dialects
# read the same way; short enough that ``source-<table>`` is a safe capture identity.
IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,56}")
MAX_COLUMNS = 16


class SourceKind(StrEnum):
    """Where a use is: a content entry, or one of the sources beyond content."""

    CONTENT = "content"
    SETTINGS = "settings"
    USER = "user"
    BYLINE = "byline"
    TABLE = "table"


class ColumnKind(StrEnum):
    """How a source column holds media: a media id, JSON (searched whole), or a media URL."""

    MEDIA_ID = "media_id"
    JSON = "json"
    URL = "url"


# The field type extraction gives each column kind (``domain.extraction``).
FIELD_TYPE_BY_COLUMN_KIND = {
    ColumnKind.MEDIA_ID: "sourceMediaId",
    ColumnKind.JSON: "sourceJson",
    ColumnKind.URL: "sourceUrl",
}


def checked_identifier(value: object, what: str) -> str:
    if not isinstance(value, str) or not IDENTIFIER.fullmatch(value):
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise InvalidSource(
            f"{what} {shown} must match ^[a-z_][a-z0-9_]{{0,56}}$ (an unquoted lower-case "
            "SQL identifier)."
        )
    return value


def parse_columns(specs: Sequence[str]) -> tuple[tuple[str, ColumnKind], ...]:
    """``column=kind`` pairs (``media_id``, ``json`` or ``url``), as an operator writes them."""
    parsed = []
    for spec in specs:
        name, sep, kind = spec.partition("=")
        if not sep:
            raise InvalidSource(f"Column {spec!r} must be written column=kind.")
        checked_identifier(name, "Column")
        try:
            parsed.append((name, ColumnKind(kind)))
        except ValueError:
            known = ", ".join(k.value for k in ColumnKind)
            raise InvalidSource(f"Column {name!r} has unknown kind {kind!r}: {known}.") from None
    return tuple(parsed)


@dataclass(frozen=True)
class HostSource:
    """A source table: its kind, its key column and the columns that hold media."""

    kind: SourceKind
    table: str
    key_column: str
    columns: tuple[tuple[str, ColumnKind], ...]

    def validated(self) -> HostSource:
        if self.kind == SourceKind.CONTENT:
            raise InvalidSource("A content collection is not a source of its own.")
        checked_identifier(self.table, "Table")
        checked_identifier(self.key_column, "Key column")
        if not self.columns:
            raise InvalidSource(f"Source {self.table!r} names no column that holds media.")
        if len(self.columns) > MAX_COLUMNS:
            raise InvalidSource(f"A source has at most {MAX_COLUMNS} columns.")
        seen: set[str] = set()
        for name, kind in self.columns:
            checked_identifier(name, "Column")
            if not isinstance(kind, ColumnKind):
                raise InvalidSource(f"Column {name!r} has no known kind.")
            if name == self.key_column:
                raise InvalidSource(
                    f"Column {name!r} is the key (--key): a source's key names its rows; "
                    "media go in other columns."
                )
            if name in seen:
                raise InvalidSource(f"Column {name!r} is named twice.")
            if name in STANDARD_CONTENT_COLUMNS:
                # Read as a content table, a source's row has these columns empty.
                raise InvalidSource(
                    f"Column {name!r} shares its name with a standard content column; a "
                    "source cannot index it."
                )
            seen.add(name)
        return self

    @property
    def collection_id(self) -> str:
        return f"{ID_PREFIX}{self.table}"

    @property
    def scope_key(self) -> str:
        return f"{self.kind.value}:{self.table}:{self.key_column}"

    @property
    def label(self) -> str:
        """The kind a reader sees: ``settings``, ``user``, ``byline`` or ``table:<name>``."""
        return _label(self.kind, self.table)

    def fields(self, reference_paths: Iterable[tuple[str, str]] = ()) -> list[FieldDefinition]:
        """The columns as fields extraction reads, with the paths declared into them."""
        declared: dict[str, list[str]] = {}
        for column, path in reference_paths:
            declared.setdefault(column, []).append(path)
        return [
            FieldDefinition(
                slug=name,
                label=name,
                type=FIELD_TYPE_BY_COLUMN_KIND[kind],
                reference_paths=tuple(sorted(declared.get(name, ()))),
            )
            for name, kind in self.columns
        ]


@dataclass(frozen=True)
class ScopeTable:
    """What a scope key says of a source's table."""

    kind: SourceKind
    table: str
    key_column: str


@dataclass(frozen=True)
class Scope:
    """What coverage, work and the index are kept per: a content collection, or a source
    beyond content. Parsed once from the scope key the tables store (a collection's slug, or
    a source's ``kind:table:key_column``). A source's ``table`` and ``key_column`` are checked
    identifiers, safe to become SQL; a collection's table is ``ec_<slug>``, and its slug is
    checked where it becomes SQL (``repository.registry.content_tables``)."""

    key: str
    kind: SourceKind
    table: str
    key_column: str

    @staticmethod
    def of(key: str) -> Scope:
        return _parsed_scope(key)

    @property
    def is_content(self) -> bool:
        return self.kind == SourceKind.CONTENT

    @property
    def label(self) -> str:
        """The kind of a use in this scope as a reader sees it: ``content``, ``settings``,
        ``user``, ``byline`` or ``table:<name>``."""
        return _label(self.kind, self.table)


@functools.lru_cache(maxsize=4096)
def _parsed_scope(key: str) -> Scope:
    if ":" not in key:
        return Scope(key, SourceKind.CONTENT, f"ec_{key}", "id")
    parts = key.split(":")
    if len(parts) != 3:
        raise InvalidSource(f"{key!r} is not a source's scope key.")
    kind, table, key_column = parts
    try:
        source_kind = SourceKind(kind)
    except ValueError:
        raise InvalidSource(f"{key!r} names no known source kind.") from None
    if source_kind == SourceKind.CONTENT:
        raise InvalidSource(f"{key!r}: a content collection's scope key is its slug.")
    return Scope(
        key,
        source_kind,
        checked_identifier(table, "Table"),
        checked_identifier(key_column, "Key column"),
    )


def is_source_scope(slug: str) -> bool:
    """Whether a scope key names a source beyond content (``Scope.of(slug).is_content``
    without checking the rest)."""
    return ":" in slug


def scope_table(slug: str) -> ScopeTable:
    """The table a source's scope key names, its identifiers checked (they become SQL)."""
    scope = Scope.of(slug)
    if scope.is_content:
        raise InvalidSource(f"{slug!r} is not a source's scope key.")
    return ScopeTable(scope.kind, scope.table, scope.key_column)


def checked_kind(value: object) -> str:
    """A source's kind as an operator names it: ``settings``, ``user``, ``byline`` or
    ``table:<name>``."""
    if isinstance(value, str):
        if value in (SourceKind.SETTINGS, SourceKind.USER, SourceKind.BYLINE):
            return value
        prefix, _, table = value.partition(":")
        if prefix == SourceKind.TABLE and IDENTIFIER.fullmatch(table):
            return value
    raise InvalidSource(
        "A source is named settings, user, byline or table:<name> (a declared table)."
    )


def kind_label(slug: str) -> str:
    """The kind of a use whose source has this scope key: ``content`` for a collection's."""
    return Scope.of(slug).label


def _label(kind: SourceKind, table: str) -> str:
    return f"table:{table}" if kind == SourceKind.TABLE else kind.value


# emdash's own tables that hold media references outside content, built in, with every column
# that may hold media in one of its versions: a user's avatar is ``avatar_url`` (a media file
# URL) in emdash, ``avatar_id`` where a host keeps a media id. A built-in source reads the
# ones its table has (``built_in_for``).
BUILT_IN: Sequence[HostSource] = (
    HostSource(SourceKind.SETTINGS, "options", "name", (("value", ColumnKind.JSON),)),
    HostSource(
        SourceKind.USER, "users", "id",
        (("avatar_url", ColumnKind.URL), ("avatar_id", ColumnKind.MEDIA_ID)),
    ),
    HostSource(
        SourceKind.BYLINE, "_emdash_bylines", "id", (("avatar_media_id", ColumnKind.MEDIA_ID),)
    ),
)  # fmt: skip


def built_in_for(shape: HostSource, present: Collection[str]) -> HostSource | None:
    """The built-in source ``shape`` over a table with the columns ``present``: the media
    columns it has; ``None`` when it lacks the key or every media column."""
    columns = tuple((name, kind) for name, kind in shape.columns if name in present)
    if shape.key_column not in present or not columns:
        return None
    return HostSource(shape.kind, shape.table, shape.key_column, columns)


BUILT_IN_TABLES = frozenset(source.table for source in BUILT_IN)


def built_in_gap(
    shape: HostSource, present: Collection[str] | None, registered: HostSource | None
) -> str | None:
    """Why the built-in source ``shape`` is not indexed as its table is now (``present``: the
    table's columns, ``None`` when there is no such table; ``registered``: the source as it is
    registered); ``None`` when it is. A site whose table lost the shape cannot be read, and
    one whose table changed is read once the reconcile tick registers it again."""
    if present is None:
        return f"table {shape.table} is not in the database"
    readable = built_in_for(shape, present)
    if readable is None:
        wanted = " or ".join(name for name, _ in shape.columns)
        return (
            f"table {shape.table} has no {shape.key_column} key or no {wanted} column, "
            "so where it keeps media is not known"
        )
    if registered != readable:
        columns = ", ".join(name for name, _ in readable.columns)
        return (
            f"{shape.table}'s media columns are now {columns}; the next reconcile tick reads them"
        )
    return None
