"""Which extraction rules an index was computed under (docs/design.md §5, "Rules").

An index answers "used nowhere" only under the rules it was built with. The rules are this
code's extraction version plus the revision of the collection's declared rules; a collection's
coverage is ``complete`` only while the rules it was indexed under are the running ones.
"""

from __future__ import annotations

from dataclasses import dataclass

# 1: emdash 0.34.0's rules. 2: images of core Portable Text gallery blocks count too.
# 3: declared reference paths, and media file URLs resolve to their media item.
# 4: media file URLs written inside any text (HTML, Markdown, link annotations, prose) are
# uses; a value that cannot be read whole fails its entry.
# Raise it with every change to what extraction finds: coverage then leaves ``complete`` and
# reconciliation re-indexes every collection under the new rules, with no operator step.
EXTRACTION_VERSION = 4


@dataclass(frozen=True)
class RulesState:
    """A collection's rules: the current declared-rules revision and what it was indexed under."""

    rules_revision: int = 0
    indexed_extraction_version: int | None = None
    indexed_rules_revision: int | None = None
    indexed_fields: str | None = None  # the fingerprint of the fields it was indexed with
    current_fields: str | None = None  # the fingerprint of its fields in the registry now
    last_complete_at: str | None = None  # when its coverage last became complete

    @property
    def current(self) -> bool:
        """The index was computed under the running rules, with the fields it has now."""
        return self.rules_current and self.fields_current

    @property
    def rules_current(self) -> bool:
        return (
            self.indexed_extraction_version == EXTRACTION_VERSION
            and self.indexed_rules_revision == self.rules_revision
        )

    @property
    def fields_current(self) -> bool:
        """The fields were not changed since it was indexed (by the CMS itself, too)."""
        return self.indexed_fields is not None and self.indexed_fields == self.current_fields

    @property
    def indexed_under(self) -> str | None:
        """The rules the index was computed under, as text (``None``: unknown)."""
        if self.indexed_extraction_version is None:
            return None
        return label(self.indexed_extraction_version, self.indexed_rules_revision or 0)

    @property
    def running(self) -> str:
        return label(EXTRACTION_VERSION, self.rules_revision)


def label(extraction_version: int, rules_revision: int) -> str:
    return f"extraction-{extraction_version}.rules-{rules_revision}"
