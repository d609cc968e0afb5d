"""``repository.db.create_engine`` (SPEC §3); the module is ``media_usage_worker.repository.db``."""

from media_usage_worker.repository.db import create_engine

__all__ = ["create_engine"]
