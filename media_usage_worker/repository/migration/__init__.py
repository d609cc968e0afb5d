"""The project's own tables over time: Alembic migrations (``scripts/``), adopting the tables a
CMS already has, and the guards that keep a downgrade from destroying state."""
