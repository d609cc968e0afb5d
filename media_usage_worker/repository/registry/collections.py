"""The collection registry: ``_emdash_collections``, ``_emdash_fields`` and ``ec_<slug>`` tables.

Creating a collection is one transaction: registry rows, the content table, its index-status
row and, once capture is active, its capture triggers. A half-created collection never exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, ProgrammingError

from media_usage_worker.domain.content_model import (
    FieldDefinition,
    validate_collection_slug,
    validate_fields,
    validate_label,
)
from media_usage_worker.domain.errors import (
    CollectionExists,
    CollectionNotFound,
    FieldExists,
    MediaUsageError,
)
from media_usage_worker.domain.vocabulary import CaptureState, CoverageStatus, ErrorCode
from media_usage_worker.repository.base.clock import db_now
from media_usage_worker.repository.base.db import Bind, on_bind, read_transaction, transaction
from media_usage_worker.repository.base.ids import new_ulid
from media_usage_worker.repository.base.predicates import registered
from media_usage_worker.repository.base.schema import (
    ADAPTER_ID,
    SCOPE_TYPE,
    collection_deletions,
    collections,
    fields,
    index_status,
)
from media_usage_worker.repository.lifecycle import activation
from media_usage_worker.repository.registry.content_tables import (
    add_field_column,
    content_table_name,
    create_content_table,
)
from media_usage_worker.repository.registry.field_registry import (
    load_fields as load_fields,  # re-exported
)


@dataclass(frozen=True)
class Collection:
    id: str
    slug: str
    label: str


def create_collection(
    bind: Bind, slug: str, label: str, fields: Sequence[FieldDefinition] = ()
) -> Collection:
    """Create the collection, its ``ec_<slug>`` table and its status row atomically."""
    slug = validate_collection_slug(slug)
    label = validate_label(label)
    definitions = validate_fields(list(fields))
    collection = Collection(id=new_ulid(), slug=slug, label=label)
    try:
        with transaction(bind) as conn:
            _assert_slug_free(conn, slug)
            # Status row and triggers first (when capture is active): content writes into the
            # new table fail until the registry row below makes the identity whole.
            activation.prepare_new_collection(conn, collection.id, slug)
            create_content_table(conn, slug, definitions)
            activation.install_for_new_collection(conn, collection.id, slug)
            conn.execute(
                collections.insert().values(
                    id=collection.id, slug=slug, label=label, created_at=db_now(),
                    updated_at=db_now(),
                )
            )  # fmt: skip
            for position, definition in enumerate(definitions):
                conn.execute(_field_row(collection.id, definition, position))
            activation.finish_new_collection(conn, collection.id, slug)
    except (IntegrityError, ProgrammingError) as exc:
        # A concurrent creator won the slug (unique key or CREATE TABLE) between our check and
        # our write; report it the same way as the check does.
        if find_collection(bind, slug) is not None:
            raise CollectionExists(f"Collection {slug!r} already exists.") from exc
        raise
    return collection


def create_field(bind: Bind, collection_slug: str, field: FieldDefinition) -> None:
    """Add a field (and its column); coverage of the collection becomes stale."""
    collection_slug = validate_collection_slug(collection_slug)
    (definition,) = validate_fields([field])
    with transaction(bind) as conn:
        collection = find_collection(conn, collection_slug)
        if collection is None:
            raise CollectionNotFound(f"No collection has slug {collection_slug!r}.")
        existing = conn.execute(
            sa.select(fields.c.id).where(
                fields.c.collection_id == collection.id, fields.c.slug == definition.slug
            )
        ).first()
        columns = {
            c["name"] for c in sa.inspect(conn).get_columns(content_table_name(collection_slug))
        }
        if existing is not None or definition.slug in columns:
            raise FieldExists(
                f"Collection {collection_slug!r} already has a field {definition.slug!r}."
            )
        position = conn.execute(
            sa.select(sa.func.coalesce(sa.func.max(fields.c.sort_order) + 1, 0)).where(
                fields.c.collection_id == collection.id
            )
        ).scalar_one()
        conn.execute(_field_row(collection.id, definition, position))
        add_field_column(conn, collection_slug, definition)
        invalidate_coverage(conn, collection, ErrorCode.STALE)


_COLLECTION = sa.select(collections.c.id, collections.c.slug, collections.c.label)


def find_collection(bind: Bind, slug: str) -> Collection | None:
    """The collection ``slug``, or ``None`` (in the caller's transaction when it is in one)."""
    with read_transaction(bind) as conn:
        row = conn.execute(_COLLECTION.where(collections.c.slug == slug)).first()
    return Collection(*row) if row else None


# The earlier name of ``load_fields`` over any bind, still importable.
collection_fields = load_fields


def find_collection_by_id(bind: Bind, collection_id: str) -> Collection | None:
    with read_transaction(bind) as conn:
        row = conn.execute(_COLLECTION.where(collections.c.id == collection_id)).first()
    return Collection(*row) if row else None


def list_collections(bind: Bind) -> list[Collection]:
    with read_transaction(bind) as conn:
        rows = conn.execute(_COLLECTION.order_by(collections.c.slug)).all()
    return [Collection(*row) for row in rows]


def _assert_slug_free(conn: sa.Connection, slug: str) -> None:
    if find_collection(conn, slug) is not None:
        raise CollectionExists(f"Collection {slug!r} already exists.")
    tombstone = conn.execute(
        sa.select(collection_deletions.c.collection_id).where(
            collection_deletions.c.collection_slug == slug
        )
    ).first()
    if tombstone is not None:
        raise CollectionExists(f"Collection {slug!r} is still being deleted.")
    if sa.inspect(conn).has_table(content_table_name(slug)):
        raise CollectionExists(f"Table {content_table_name(slug)!r} already exists.")


class CollectionRegistry:
    """The registry as one object over a bind, the API emdash's has: each method is the module
    function above (``get`` is ``find_collection``, ``list`` is ``list_collections``)."""

    def __init__(self, engine: Bind) -> None:
        self.bind = self.engine = engine

    create_collection = on_bind(create_collection)
    create_field = on_bind(create_field)
    get = on_bind(find_collection)
    get_by_id = on_bind(find_collection_by_id)
    list = on_bind(list_collections)
    fields = on_bind(load_fields)


def _field_row(collection_id: str, definition: FieldDefinition, position: int) -> sa.Insert:
    return fields.insert().values(
        id=new_ulid(),
        collection_id=collection_id,
        slug=definition.slug,
        label=definition.label,
        type=definition.type,
        column_type=definition.column_type,
        required=int(definition.required),
        validation=definition.validation_json(),
        sort_order=position,
    )


def invalidate_coverage(conn: sa.Connection, collection: Collection, code: ErrorCode) -> None:
    """Bump the epoch and require reconciliation: indexed projections predate a new field or
    new extraction rules (``code`` says which)."""
    s = index_status.c
    active = sa.and_(s.capture_state.is_not(None), s.capture_state == CaptureState.ACTIVE)
    result = conn.execute(
        index_status.update()
        .where(
            s.adapter_id == ADAPTER_ID,
            s.scope_type == SCOPE_TYPE,
            s.scope_key == collection.slug,
            s.collection_id == collection.id,
        )
        .values(
            change_epoch=s.change_epoch + 1,
            # Before activation a never-indexed collection stays "never"; anything else is stale.
            status=sa.case(
                (sa.and_(s.status == CoverageStatus.NEVER, sa.not_(active)), s.status),
                else_=CoverageStatus.STALE.value,
            ),
            completed_at=None,
            cursor=None,
            last_error_code=code,
            reconciliation_required=1,
            updated_at=db_now(),
        )
        .returning(s.capture_state)
    ).all()
    if not result and activation.is_activation_active(conn):
        raise MediaUsageError(
            f"Collection {collection.slug!r} has no active capture status row; the change was "
            "aborted so coverage cannot silently stay complete."
        )


def collection_by_slug(conn: sa.Connection, slug: str) -> Collection:
    """The registered collection ``slug``, read in the caller's transaction."""
    collection = find_collection(conn, slug)
    if collection is None:
        raise CollectionNotFound(f"No collection has slug {slug!r}.")
    return collection


def epoch_of(conn: sa.Connection, collection_id: str) -> int:
    """The scope's change epoch now."""
    status = index_status.c
    epoch = sa.select(status.change_epoch).where(status.collection_id == collection_id)
    return int(conn.execute(epoch).scalar_one())


def is_registered(bind: Bind, collection_id: str, slug: str) -> bool:
    """The collection still exists with exactly this id and slug."""
    with transaction(bind) as conn:
        return bool(conn.execute(sa.select(registered(collection_id, slug))).scalar_one())


# The flows made of these statements moved up to ``pipeline.registry``; their names stay
# importable from here (looked up on first use, so this module imports nothing above the data
# layer).
_FLOWS = frozenset({"request_reindex", "request_source_reindex"})


def __getattr__(name: str) -> Any:
    if name in _FLOWS:
        from media_usage_worker.pipeline import registry

        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
