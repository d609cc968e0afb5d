"""Changes to what the index covers and how (docs/design.md §5, "Rules"): new collections,
declared reference paths and media URL prefixes, and an operator's request to re-index a scope.

Each change is one transaction: it stores what changed, counts a new rules revision for the
scopes it touches and takes their coverage out of ``complete`` (their epoch moves, so a run in
progress restarts under the new rules). A change that would change nothing reports so and
leaves every row as it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from media_usage_worker.domain.content_model import validate_collection_slug
from media_usage_worker.domain.errors import (
    CaptureInactive,
    InvalidRule,
    RuleNotFound,
    SourceNotFound,
)
from media_usage_worker.domain.reference_paths import MAX_PATHS_PER_COLLECTION, ReferencePath
from media_usage_worker.domain.vocabulary import ErrorCode
from media_usage_worker.repository.base.db import Bind, transaction
from media_usage_worker.repository.lifecycle.activation import is_activation_active
from media_usage_worker.repository.registry import collections, rules
from media_usage_worker.repository.registry.collections import create_collection
from media_usage_worker.repository.registry.host_sources import list_sources

if TYPE_CHECKING:
    from sqlalchemy import Connection

__all__ = [
    "add_media_url_prefix",
    # One transaction of the data layer's (registry rows, content table, status row, triggers).
    "create_collection",
    "declare_reference_path",
    "remove_media_url_prefix",
    "remove_reference_path",
    "request_reindex",
    "request_source_reindex",
]


def declare_reference_path(bind: Bind, collection_slug: str, path: ReferencePath) -> bool:
    """Store the path; ``False`` when it was already declared (nothing changes then)."""
    with transaction(bind) as conn:
        collection = rules.collection_held(conn, collection_slug)
        if not rules.field_exists(conn, collection.id, path.field_slug):
            raise InvalidRule(
                f"Reference path {path.text!r}: collection {collection_slug!r} has no field "
                f"{path.field_slug!r}."
            )
        declared = rules.count_other_reference_paths(conn, collection.id, path.text)
        if declared >= MAX_PATHS_PER_COLLECTION:
            raise InvalidRule(
                f"Collection {collection_slug!r} already declares {declared} reference paths, "
                f"the most one collection may have ({MAX_PATHS_PER_COLLECTION}); remove one "
                "first, or declare a shorter path that reaches several places ([] steps)."
            )
        added = rules.insert_reference_path(conn, collection.id, path)
        if added:
            rules.count_rules_change(conn, [collection])
        return added


def remove_reference_path(bind: Bind, collection_slug: str, path_text: str) -> None:
    with transaction(bind) as conn:
        collection = rules.collection_held(conn, collection_slug)
        if not rules.delete_reference_path(conn, collection.id, path_text):
            raise RuleNotFound(
                f"Collection {collection_slug!r} declares no reference path {path_text!r}."
            )
        rules.count_rules_change(conn, [collection])


def add_media_url_prefix(bind: Bind, prefix: str) -> bool:
    """Store the (validated) prefix; ``False`` when it was already there. Every scope is
    touched: a media URL can be anywhere."""
    with transaction(bind) as conn:
        added = rules.insert_media_url_prefix(conn, prefix)
        if added:
            rules.count_rules_change(conn, rules.all_collections_held(conn))
        return added


def remove_media_url_prefix(bind: Bind, prefix: str) -> None:
    with transaction(bind) as conn:
        if not rules.delete_media_url_prefix(conn, prefix):
            raise RuleNotFound(f"No media URL prefix {prefix!r} is declared.")
        rules.count_rules_change(conn, rules.all_collections_held(conn))


def _require_capture(conn: Connection) -> None:
    if not is_activation_active(conn):
        raise CaptureInactive()


def request_reindex(bind: Bind, slug: str) -> int:
    """Take the collection out of ``complete`` so the reconciliation re-indexes every entry;
    returns the new change epoch. Refused, changing nothing, before activation
    (``CaptureInactive``) or for an unknown slug (``CollectionNotFound``)."""
    validate_collection_slug(slug)
    with transaction(bind) as conn:
        collection = collections.collection_by_slug(conn, slug)
        _require_capture(conn)
        collections.invalidate_coverage(conn, collection, ErrorCode.REINDEX_REQUESTED)
        return collections.epoch_of(conn, collection.id)


def request_source_reindex(bind: Bind, kind: str) -> int:
    """``request_reindex`` of a source beyond content, named by its kind (``settings``,
    ``user``, ``byline``, ``table:<name>``): its rows are re-indexed through work items, the
    only way a source's rows are written (docs/design.md §11a)."""
    with transaction(bind) as conn:
        found = [s for s in list_sources(conn) if s.label == kind]
        if not found:
            raise SourceNotFound(f"No source of kind {kind!r}.")
        _require_capture(conn)
        source = found[0]
        scope = collections.Collection(source.collection_id, source.scope_key, source.label)
        collections.invalidate_coverage(conn, scope, ErrorCode.REINDEX_REQUESTED)
        return collections.epoch_of(conn, source.collection_id)
