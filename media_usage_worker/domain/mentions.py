"""The purge's final sweep as pure logic: which of a batch's items a piece of the site's text
mentions, by id or by storage key, anywhere inside it (docs/design.md §13, "The final sweep").

It is the belt to the index's braces: it knows no extraction rule, so a mention in any form
the index does not read (a file name in prose, an id in a column nobody declared) still keeps
the file. Every needle is searched in one pass over each value (Aho-Corasick), so the cost is
the site's text, not the text times the batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import ahocorasick


@dataclass(frozen=True)
class Mention:
    """Where the sweep found an item named: table, column and the row's key."""

    table: str
    column: str
    row_key: str

    def describe(self) -> str:
        return f"{self.table}.{self.column} (row {self.row_key})"


class Needles:
    """The ids and storage keys of a batch, each mapped to the items it names."""

    def __init__(self, items: Mapping[str, str]) -> None:
        """``items``: media id → storage key. An empty key names no file and is not searched."""
        owners: dict[str, set[str]] = {}
        for media_id, key in items.items():
            for needle in (media_id, key):
                if needle:
                    owners.setdefault(needle, set()).add(media_id)
        self._automaton = ahocorasick.Automaton()
        for needle, ids in owners.items():
            self._automaton.add_word(needle, tuple(sorted(ids)))
        self._empty = not owners
        if owners:
            self._automaton.make_automaton()

    def found_in(self, text: str) -> set[str]:
        """The media ids whose id or storage key occurs anywhere in ``text``."""
        if self._empty or not text:
            return set()
        found: set[str] = set()
        for _, ids in self._automaton.iter(text):
            found.update(ids)
        return found


def as_text(value: object) -> str | None:
    """A column's value as the sweep reads it: text as it is, bytes decoded (undecodable bytes
    replaced, so a needle elsewhere in them is still found); anything else holds no text."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return None


def first_mentions(
    rows: Iterable[tuple[str, str, str, object]], needles: Needles, into: dict[str, Mention]
) -> None:
    """Record in ``into`` where each item is first mentioned, from (table, column, row key,
    value) rows; an item already found is not looked for again."""
    for table, column, row_key, value in rows:
        text = as_text(value)
        if text is None:
            continue
        for media_id in needles.found_in(text):
            into.setdefault(media_id, Mention(table, column, row_key))
