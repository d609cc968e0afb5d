"""Clean-up: the quarantine of retired media items, the audit of operator actions, and the
files of purged items not yet handed to the host.

Revision ID: 0006_cleanup
Revises: 0005_host_sources
"""

import sqlalchemy as sa
from alembic import op

from media_usage_worker.domain.errors import DowngradeRefused
from media_usage_worker.repository.base.schema import CLEANUP_TABLES, purges, quarantine

revision = "0006_cleanup"
down_revision = "0005_host_sources"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in CLEANUP_TABLES:
        table.create(op.get_bind(), checkfirst=True)


def downgrade() -> None:
    bind = op.get_bind()
    for table in (quarantine, purges):
        if bind.execute(sa.select(1).select_from(table).limit(1)).first() is not None:
            # Dropping either would lose retired items, or files the host must still delete.
            raise DowngradeRefused(
                f"Downgrade refused: {table.name} is not empty; restore or purge the retired "
                "items, and let the purge deliver their files, first."
            )
    for table in reversed(CLEANUP_TABLES):
        table.drop(bind, checkfirst=True)
