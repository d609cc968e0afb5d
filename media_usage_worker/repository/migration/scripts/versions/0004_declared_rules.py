"""The site's declared extraction rules: reference paths and media URL prefixes.

Revision ID: 0004_declared_rules
Revises: 0003_rules_state
"""

import sqlalchemy as sa
from alembic import op

from media_usage_worker.domain.errors import DowngradeRefused
from media_usage_worker.repository.base.schema import media_url_prefixes, reference_paths

revision = "0004_declared_rules"
down_revision = "0003_rules_state"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Empty tables: the running rules are the ones every index was built with until a site
    # declares a rule.
    reference_paths.create(op.get_bind(), checkfirst=True)
    media_url_prefixes.create(op.get_bind(), checkfirst=True)


def downgrade() -> None:
    bind = op.get_bind()
    for table in (reference_paths, media_url_prefixes):
        if bind.execute(sa.select(1).select_from(table).limit(1)).first() is not None:
            # Dropping declared rules would silently narrow what "used nowhere" means.
            raise DowngradeRefused(
                f"Downgrade refused: {table.name} still holds declared rules; remove them with "
                "`media-usage rules remove` first."
            )
        table.drop(bind, checkfirst=True)
