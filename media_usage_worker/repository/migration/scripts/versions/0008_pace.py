"""The dispatch tick's pace samples: whether the workers keep up with the site's writes.

Revision ID: 0008_pace
Revises: 0007_cleanup_safety
"""

import sqlalchemy as sa
from alembic import op

from media_usage_worker.repository.base.schema import pace_samples

revision = "0008_pace"
down_revision = "0007_cleanup_safety"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if not sa.inspect(op.get_bind()).has_table(pace_samples.name):
        pace_samples.create(op.get_bind())


def downgrade() -> None:
    pace_samples.drop(op.get_bind(), checkfirst=True)
