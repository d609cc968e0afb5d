"""The built-in sources over the columns emdash's tables really have: a user's avatar is
``users.avatar_url`` (a media file URL) in emdash, which the user source did not read, so on
an emdash site it was not registered at all. Each built-in source is registered (or its columns
brought up to date) over what its table has; on an active database it is captured, and one
whose columns changed is re-indexed. The rules record also keeps the fingerprint of the
fields each index was computed with, so a field the CMS adds or deletes itself is noticed.

Revision ID: 0009_emdash_sources
Revises: 0008_pace
"""

import sqlalchemy as sa
from alembic import op

from media_usage_worker.repository.base.schema import rules_state
from media_usage_worker.repository.registry.built_in_sources import register_built_in_sources

revision = "0009_emdash_sources"
down_revision = "0008_pace"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    if "indexed_fields" not in {c["name"] for c in inspector.get_columns(rules_state.name)}:
        op.add_column(rules_state.name, sa.Column("indexed_fields", sa.Text()))
    register_built_in_sources(bind)


def downgrade() -> None:
    """The sources stay registered over the columns their tables have."""
    with op.batch_alter_table(rules_state.name) as batch:
        batch.drop_column("indexed_fields")
