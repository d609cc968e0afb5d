"""When each scope's coverage last became ``complete``: ``last_complete_at`` on this project's
rules state. Unknown (NULL) for what completed before this revision, until it completes again.

Revision ID: 0011_last_complete
Revises: 0010_byline_locale
"""

import sqlalchemy as sa
from alembic import op

from media_usage_worker.repository.base.schema import rules_state

revision = "0011_last_complete"
down_revision = "0010_byline_locale"
branch_labels = None
depends_on = None


def upgrade() -> None:
    present = {c["name"] for c in sa.inspect(op.get_bind()).get_columns(rules_state.name)}
    if "last_complete_at" not in present:
        op.add_column(rules_state.name, sa.Column("last_complete_at", sa.Text()))


def downgrade() -> None:
    """The column stays: older code ignores it, and a downgrade never drops a site's data."""
