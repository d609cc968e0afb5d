"""emdash core tables the media usage subsystem reads: collections, fields, revisions, media.

Revision ID: 0001_core_content_registry
Revises:

Tables are created only where absent, so a database emdash already created is adopted as is.
``repository.schema`` is the frozen emdash 0.34.0 shape; a later change to it needs its own
revision with explicit operations.
"""

import sqlalchemy as sa
from alembic import op

from media_usage_worker.domain.errors import DowngradeRefused
from media_usage_worker.repository.base.schema import CORE_TABLES, collections

revision = "0001_core_content_registry"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    for table in CORE_TABLES:
        table.create(bind, checkfirst=True)


def downgrade() -> None:
    bind = op.get_bind()
    registered = bind.execute(sa.select(sa.func.count()).select_from(collections)).scalar_one()
    if registered:
        raise DowngradeRefused(
            f"Downgrade refused: {registered} collection(s) are registered; dropping the registry "
            "would orphan their ec_ content tables."
        )
    for table in reversed(CORE_TABLES):
        table.drop(bind, checkfirst=True)
