"""The built-in sources over the columns emdash's tables really have: a user's avatar is
``users.avatar_url`` (a media file URL) in emdash, which the user source did not read, so on
an emdash site it was not registered at all. Each built-in source is registered (or its columns
brought up to date) over what its table has; on an active database it is captured, and one
whose columns changed is re-indexed. The rules record also keeps the fingerprint of the
fields each index was computed with, so a field the CMS adds or deletes itself is noticed.

Revision ID: 0009_emdash_sources
Revises: 0008_pace
"""

import json

import sqlalchemy as sa
from alembic import op

from media_usage_worker.domain.host_sources import BUILT_IN, built_in_for
from media_usage_worker.domain.vocabulary import ErrorCode
from media_usage_worker.repository.activation import capture_source, is_activation_active
from media_usage_worker.repository.collections import Collection, invalidate_coverage
from media_usage_worker.repository.host_sources import registry_row
from media_usage_worker.repository.schema import host_sources, rules_state

revision = "0009_emdash_sources"
down_revision = "0008_pace"
branch_labels = None
depends_on = None

_h = host_sources.c


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    if "indexed_fields" not in {c["name"] for c in inspector.get_columns(rules_state.name)}:
        op.add_column(rules_state.name, sa.Column("indexed_fields", sa.Text()))
    active = is_activation_active(bind)
    for shape in BUILT_IN:
        if not inspector.has_table(shape.table):
            continue
        source = built_in_for(shape, {c["name"] for c in inspector.get_columns(shape.table)})
        if source is None:
            continue
        row = registry_row(source)
        stored = bind.execute(
            sa.select(_h.columns).where(_h.collection_id == source.collection_id)
        ).scalar_one_or_none()
        if stored is None:
            bind.execute(host_sources.insert().values(**row))
        elif json.loads(stored) != json.loads(row["columns"]):
            bind.execute(
                host_sources.update()
                .where(_h.collection_id == source.collection_id)
                .values(columns=row["columns"])
            )
        else:
            continue
        if active:
            capture_source(bind, source)
            if stored is not None:
                scope = Collection(source.collection_id, source.scope_key, source.label)
                invalidate_coverage(bind, scope, ErrorCode.RULES_CHANGED)


def downgrade() -> None:
    """The sources stay registered over the columns their tables have."""
    with op.batch_alter_table(rules_state.name) as batch:
        batch.drop_column("indexed_fields")
