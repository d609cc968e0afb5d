"""The key ranges a reconciliation hands to the workers instead of a work row per entry.

Revision ID: 0012_backfill_ranges
Revises: 0011_last_complete
"""

import sqlalchemy as sa
from alembic import op

from media_usage_worker.repository.base.schema import backfill_ranges

revision = "0012_backfill_ranges"
down_revision = "0011_last_complete"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if not sa.inspect(op.get_bind()).has_table(backfill_ranges.name):
        backfill_ranges.create(op.get_bind())


def downgrade() -> None:
    backfill_ranges.drop(op.get_bind(), checkfirst=True)
