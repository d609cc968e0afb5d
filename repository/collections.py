"""``repository.collections.CollectionRegistry`` (SPEC §3, §4); the module is
``media_usage_worker.repository.collections``."""

from media_usage_worker.repository.collections import CollectionRegistry

__all__ = ["CollectionRegistry"]
