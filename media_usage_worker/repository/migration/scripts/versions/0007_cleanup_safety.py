"""Clean-up safety: the quarantine's storage keys indexed (a URL use resolves to a retired
item, and a purge asks whether another row names a key), parked undeliverable files, and the
capture of ``revisions`` (a draft edited in place is a write to its entry) on a database whose
capture is already active.

Revision ID: 0007_cleanup_safety
Revises: 0006_cleanup
"""

import sqlalchemy as sa
from alembic import op

from media_usage_worker.repository.lifecycle import triggers
from media_usage_worker.repository.lifecycle.activation import is_activation_active

revision = "0007_cleanup_safety"
down_revision = "0006_cleanup"
branch_labels = None
depends_on = None

_INDEX = "idx__media_usage_worker_quarantine_storage_key"


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    if "parked_at" not in {c["name"] for c in inspector.get_columns("_media_usage_worker_purges")}:
        op.add_column("_media_usage_worker_purges", sa.Column("parked_at", sa.Text()))
    existing = {i["name"] for i in inspector.get_indexes("_media_usage_worker_quarantine")}
    if _INDEX not in existing:
        op.create_index(_INDEX, "_media_usage_worker_quarantine", ["storage_key"])
    if is_activation_active(bind):
        triggers.install_revisions(bind)


def downgrade() -> None:
    triggers.remove_revisions(op.get_bind())
    op.drop_index(_INDEX, table_name="_media_usage_worker_quarantine")
    with op.batch_alter_table("_media_usage_worker_purges") as batch:
        batch.drop_column("parked_at")
