"""The emdash content model this project understands: slugs, field types, field definitions.

Slugs become table and column names, so they are validated here, before any SQL exists.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from media_usage_worker.domain.errors import InvalidArgument, InvalidSlug
from media_usage_worker.domain.validation import storable

# ec_<slug> plus emdash's longest index suffix stays near PostgreSQL's 63-byte identifier limit.
COLLECTION_SLUG_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,39}")
FIELD_SLUG_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,62}")

RESERVED_COLLECTION_SLUGS = frozenset(
    {"content", "media", "users", "revisions", "taxonomies", "options", "audit_logs", "reorder"}
)
STANDARD_CONTENT_COLUMNS = (
    "id",
    "slug",
    "status",
    "author_id",
    "primary_byline_id",
    "created_at",
    "updated_at",
    "published_at",
    "scheduled_at",
    "deleted_at",
    "version",
    "live_revision_id",
    "draft_revision_id",
    "locale",
    "translation_group",
)
RESERVED_FIELD_SLUGS = frozenset(STANDARD_CONTENT_COLUMNS) | {"terms", "bylines", "byline"}

# emdash's FIELD_TYPE_TO_COLUMN (docs/design.md §1).
COLUMN_TYPE_BY_FIELD_TYPE: Mapping[str, str] = {
    **dict.fromkeys(
        ("string", "text", "slug", "url", "select", "datetime", "reference", "image", "file"),
        "TEXT",
    ),
    "number": "REAL",
    "integer": "INTEGER",
    "boolean": "INTEGER",
    **dict.fromkeys(("multiSelect", "portableText", "repeater", "json"), "JSON"),
}
# The columns of a source beyond content, as fields (``domain.host_sources``): read as text.
SOURCE_COLUMN_TYPES: Mapping[str, str] = {
    "sourceMediaId": "TEXT",
    "sourceJson": "JSON",
    "sourceUrl": "TEXT",
}
# A required column is NOT NULL with this default when the field gives none.
EMPTY_DEFAULT_BY_COLUMN_TYPE: Mapping[str, str] = {
    "TEXT": "''",
    "REAL": "0.0",
    "INTEGER": "0",
    "JSON": "'null'",
}


def validate_collection_slug(slug: object) -> str:
    if not isinstance(slug, str) or not COLLECTION_SLUG_PATTERN.fullmatch(slug):
        raise InvalidSlug(
            f"Collection slug {_shown(slug)} must match ^[a-z][a-z0-9_]{{0,39}}$ "
            "(lower-case letter first, then up to 39 lower-case letters, digits or underscores)."
        )
    if slug in RESERVED_COLLECTION_SLUGS:
        raise InvalidSlug(f"Collection slug {slug!r} is reserved by emdash.")
    return slug


def validate_field_slug(slug: object) -> str:
    if not isinstance(slug, str) or not FIELD_SLUG_PATTERN.fullmatch(slug):
        raise InvalidSlug(
            f"Field slug {_shown(slug)} must match ^[a-z][a-z0-9_]{{0,62}}$ "
            "(lower-case letter first, then up to 62 lower-case letters, digits or underscores)."
        )
    if slug in RESERVED_FIELD_SLUGS:
        raise InvalidSlug(f"Field slug {slug!r} is reserved for a standard content column.")
    return slug


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class FieldDefinition:
    """One field of a collection, as emdash's ``_emdash_fields`` row describes it."""

    slug: str
    label: str
    type: str
    required: bool = False
    validation: Mapping[str, Any] | None = field(default=None, hash=False, compare=True)
    # The stored validation text is not a JSON object: a repeater's sub-fields are then unknown.
    validation_unreadable: bool = False
    # The site's declared reference paths into this field (``domain.reference_paths``).
    reference_paths: tuple[str, ...] = ()

    @property
    def column_type(self) -> str:
        if self.type in SOURCE_COLUMN_TYPES:
            return SOURCE_COLUMN_TYPES[self.type]
        return COLUMN_TYPE_BY_FIELD_TYPE[self.type]

    def validated(self) -> FieldDefinition:
        """Return self after checking every attribute; raises ``InvalidArgument``."""
        validate_field_slug(self.slug)
        if not isinstance(self.label, str) or not self.label.strip():
            raise InvalidArgument(f"Field {self.slug!r} needs a non-empty label.")
        if self.type not in COLUMN_TYPE_BY_FIELD_TYPE:
            known = ", ".join(sorted(COLUMN_TYPE_BY_FIELD_TYPE))
            raise InvalidArgument(f"Field {self.slug!r} has unknown type {self.type!r}: {known}.")
        if not isinstance(self.required, bool):
            raise InvalidArgument(f"Field {self.slug!r}: required must be true or false.")
        if self.validation is not None:
            if not isinstance(self.validation, Mapping):
                raise InvalidArgument(f"Field {self.slug!r}: validation must be a JSON object.")
            if nested_deeper_than(self.validation, MAX_VALIDATION_DEPTH):
                raise InvalidArgument(
                    f"Field {self.slug!r}: validation is nested more than "
                    f"{MAX_VALIDATION_DEPTH} levels deep."
                )
            try:
                json.dumps(self.validation)
            except (TypeError, ValueError) as exc:
                raise InvalidArgument(
                    f"Field {self.slug!r}: validation is not JSON-serialisable."
                ) from exc
        if self.type == "repeater":
            _validate_sub_fields(self)
        return self

    def validation_json(self) -> str | None:
        return None if self.validation is None else json.dumps(self.validation, sort_keys=True)


def _validate_sub_fields(definition: FieldDefinition) -> None:
    sub_fields = (definition.validation or {}).get("subFields", [])
    if not isinstance(sub_fields, list):
        raise InvalidArgument(f"Repeater {definition.slug!r}: subFields must be a list.")
    for sub in sub_fields:
        if not isinstance(sub, Mapping) or not isinstance(sub.get("slug"), str):
            raise InvalidArgument(
                f"Repeater {definition.slug!r}: each sub-field needs a string slug."
            )
        if not isinstance(sub.get("type"), str):
            raise InvalidArgument(
                f"Repeater {definition.slug!r}: sub-field {sub['slug']!r} needs a type."
            )


# A field's validation is a small settings object; deeper nesting is a host's bug, and past
# Python's recursion limit no JSON encoder or decoder can handle it.
MAX_VALIDATION_DEPTH = 32


def nested_deeper_than(value: object, limit: int) -> bool:
    """Whether ``value`` (parsed JSON) nests lists and objects more than ``limit`` deep; walked
    without recursion, so any depth is answered."""
    level: list[object] = [value]
    for _ in range(limit + 1):
        children: list[object] = []
        for item in level:
            if isinstance(item, Mapping):
                children.extend(item.values())
            elif isinstance(item, list | tuple):
                children.extend(item)
        if not children:
            return False
        level = children
    return True


def validate_fields(fields: object) -> tuple[FieldDefinition, ...]:
    if not isinstance(fields, list | tuple):
        raise InvalidArgument("Fields must be a list of FieldDefinition.")
    seen: set[str] = set()
    result = []
    for item in fields:
        if not isinstance(item, FieldDefinition):
            raise InvalidArgument("Fields must be a list of FieldDefinition.")
        item.validated()
        if item.slug in seen:
            raise InvalidArgument(f"Field slug {item.slug!r} appears twice.")
        seen.add(item.slug)
        result.append(item)
    return tuple(result)


def validate_label(label: object) -> str:
    if not isinstance(label, str) or not label.strip() or len(label) > 1000 or not storable(label):
        raise InvalidArgument(
            "Collection label must be a non-empty string of at most 1000 chars, with no NUL "
            "and valid UTF-8."
        )
    return label
