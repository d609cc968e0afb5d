"""``repository.migrate``: upgrade, downgrade and revision checks by their fixed import path.

The code lives in ``media_usage_worker.repository.migration.migrate``.
"""

from media_usage_worker.repository.migration.migrate import (
    ADVISORY_LOCK_KEY,
    MIGRATIONS_DIR,
    VERSION_TABLE,
    check_revision,
    current_revision,
    downgrade,
    head_revision,
    schema_problem,
    upgrade,
)

__all__ = [
    "ADVISORY_LOCK_KEY",
    "MIGRATIONS_DIR",
    "VERSION_TABLE",
    "check_revision",
    "current_revision",
    "downgrade",
    "head_revision",
    "schema_problem",
    "upgrade",
]
