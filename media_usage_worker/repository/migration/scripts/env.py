"""Alembic environment: always run on the connection ``repository.migrate`` hands over."""

from alembic import context

from media_usage_worker.repository.base.schema import metadata
from media_usage_worker.repository.migration.migrate import VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    render_as_batch=connection.dialect.name == "sqlite",
    transactional_ddl=True,
)
with context.begin_transaction():
    context.run_migrations()
