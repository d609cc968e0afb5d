"""Clean-up: the quarantine of retired media items and the audit of operator actions.

Revision ID: 0006_cleanup
Revises: 0005_host_sources
"""

import sqlalchemy as sa
from alembic import op

from media_usage_worker.domain.errors import DowngradeRefused
from media_usage_worker.repository.schema import CLEANUP_TABLES, quarantine

revision = "0006_cleanup"
down_revision = "0005_host_sources"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in CLEANUP_TABLES:
        table.create(op.get_bind(), checkfirst=True)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.execute(sa.select(1).select_from(quarantine).limit(1)).first() is not None:
        # Dropping the quarantine would lose retired items for good, unpurged.
        raise DowngradeRefused(
            "Downgrade refused: _media_usage_worker_quarantine holds retired media items; "
            "restore or purge them first."
        )
    for table in reversed(CLEANUP_TABLES):
        table.drop(bind, checkfirst=True)
