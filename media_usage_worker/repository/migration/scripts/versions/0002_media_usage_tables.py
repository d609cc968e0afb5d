"""Every ``_emdash_media_usage_*`` table of emdash 0.34.0, with the seeded singleton rows.

Revision ID: 0002_media_usage_tables
Revises: 0001_core_content_registry
"""

from alembic import op

from media_usage_worker.repository.base.schema import MEDIA_USAGE_TABLES, activation, cleanup
from media_usage_worker.repository.migration.guards import (
    assert_media_usage_drained,
    drop_capture_function,
)

revision = "0002_media_usage_tables"
down_revision = "0001_core_content_registry"
branch_labels = None
depends_on = None

SEEDED_ROWS = (
    (activation, {"task_key": "incremental_capture", "state": "expanded"}),
    (cleanup, {"task_key": "projection_gc", "next_eligible_at": "1970-01-01T00:00:00.000Z"}),
)


def upgrade() -> None:
    bind = op.get_bind()
    for table in MEDIA_USAGE_TABLES:
        table.create(bind, checkfirst=True)
    for table, row in SEEDED_ROWS:
        key = table.c.task_key
        if bind.execute(table.select().where(key == row["task_key"])).first() is None:
            bind.execute(table.insert().values(**row))


def downgrade() -> None:
    bind = op.get_bind()
    assert_media_usage_drained(bind)
    drop_capture_function(bind)
    for table in reversed(MEDIA_USAGE_TABLES):
        table.drop(bind, checkfirst=True)
