"""``repository.activation.activate`` (SPEC §3, §6); the module is
``media_usage_worker.repository.activation``."""

from media_usage_worker.repository.activation import activate

__all__ = ["activate"]
