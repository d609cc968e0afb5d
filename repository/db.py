"""``repository.db``: the engine factory and transaction helpers by their fixed import path.

The code lives in ``media_usage_worker.repository.base.db``.
"""

from media_usage_worker.domain.errors import InvalidDatabaseURL
from media_usage_worker.repository.base.db import (
    ACCEPTED_URLS,
    POSTGRES_DRIVERS,
    SQLITE_BUSY_TIMEOUT_SECONDS,
    SQLITE_DRIVERS,
    Bind,
    create_engine,
    parse_database_url,
    read_transaction,
    transaction,
)

__all__ = [
    "ACCEPTED_URLS",
    "POSTGRES_DRIVERS",
    "SQLITE_BUSY_TIMEOUT_SECONDS",
    "SQLITE_DRIVERS",
    "Bind",
    "InvalidDatabaseURL",
    "create_engine",
    "parse_database_url",
    "read_transaction",
    "transaction",
]
