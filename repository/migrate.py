"""``repository.migrate.upgrade`` and ``downgrade`` (SPEC §3); the module is
``media_usage_worker.repository.migrate``."""

from media_usage_worker.repository.migrate import downgrade, upgrade

__all__ = ["downgrade", "upgrade"]
