"""Sources of media references beyond content collections, and emdash's tables that hold them.

Revision ID: 0005_host_sources
Revises: 0004_declared_rules
"""

import sqlalchemy as sa
from alembic import op

from media_usage_worker.domain.errors import DowngradeRefused
from media_usage_worker.domain.host_sources import BUILT_IN, SourceKind, built_in_for
from media_usage_worker.repository.base.schema import HOST_REFERENCE_TABLES, host_sources
from media_usage_worker.repository.registry.host_sources import registry_row

revision = "0005_host_sources"
down_revision = "0004_declared_rules"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    host_sources.create(bind, checkfirst=True)
    # emdash's own tables: created only where the database has none (a host's are adopted as
    # they are; a downgrade drops them only while they are empty).
    for table in HOST_REFERENCE_TABLES:
        table.create(bind, checkfirst=True)
    # The built-in sources, over the columns the host's table has.
    inspector = sa.inspect(bind)
    for shape in BUILT_IN:
        source = built_in_for(shape, {c["name"] for c in inspector.get_columns(shape.table)})
        if source is not None:
            bind.execute(host_sources.insert().values(**registry_row(source)))


def downgrade() -> None:
    bind = op.get_bind()
    declared = host_sources.c.kind == SourceKind.TABLE
    if bind.execute(sa.select(1).where(declared).limit(1)).first() is not None:
        # The sources' triggers and index rows would be left without their registry.
        raise DowngradeRefused(
            "Downgrade refused: _media_usage_worker_sources still lists declared sources; "
            "remove them with `media-usage sources remove` first."
        )
    for table in HOST_REFERENCE_TABLES:
        if bind.execute(sa.select(1).select_from(table).limit(1)).first() is not None:
            # Earlier revisions drop the media library; this table's rows (and, for bylines,
            # their foreign key to it) are the site's, and are not dropped with it.
            raise DowngradeRefused(
                f"Downgrade refused: {table.name} holds rows; this project does not drop a "
                "site's settings, users or bylines."
            )
    host_sources.drop(bind, checkfirst=True)
    for table in reversed(HOST_REFERENCE_TABLES):
        table.drop(bind, checkfirst=True)
