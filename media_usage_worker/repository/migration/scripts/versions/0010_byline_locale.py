"""A byline per locale, as emdash keeps them: ``locale`` and ``translation_group`` on the
``_emdash_bylines`` table this project created where a database had none (emdash's own table has
them already and is left as it is). Existing bylines are ``en``, emdash's default.

Revision ID: 0010_byline_locale
Revises: 0009_emdash_sources
"""

import sqlalchemy as sa
from alembic import op

from media_usage_worker.repository.base.schema import bylines

revision = "0010_byline_locale"
down_revision = "0009_emdash_sources"
branch_labels = None
depends_on = None

_INDEXES = (
    ("idx__emdash_bylines_locale", "locale"),
    ("idx__emdash_bylines_translation_group", "translation_group"),
)


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if not inspector.has_table(bylines.name):
        return
    present = {c["name"] for c in inspector.get_columns(bylines.name)}
    if "locale" in present:
        return
    op.add_column(bylines.name, sa.Column("locale", sa.Text(), nullable=False, server_default="en"))
    if "translation_group" not in present:
        op.add_column(bylines.name, sa.Column("translation_group", sa.Text()))
    indexes = {i["name"] for i in inspector.get_indexes(bylines.name)}
    for name, column in _INDEXES:
        if name not in indexes:
            op.create_index(name, bylines.name, [column])


def downgrade() -> None:
    """The columns stay: a downgrade never drops a site's data, and older code ignores them."""
