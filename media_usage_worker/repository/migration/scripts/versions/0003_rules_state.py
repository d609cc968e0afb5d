"""This project's record of the extraction rules each collection was indexed under.

Revision ID: 0003_rules_state
Revises: 0002_media_usage_tables
"""

from alembic import op

from media_usage_worker.repository.base.schema import rules_state

revision = "0003_rules_state"
down_revision = "0002_media_usage_tables"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # No rows: every collection counts as indexed under unknown rules, so coverage indexed by
    # an earlier version (without gallery blocks) stops being ``complete`` and is reconciled.
    rules_state.create(op.get_bind(), checkfirst=True)


def downgrade() -> None:
    rules_state.drop(op.get_bind(), checkfirst=True)
