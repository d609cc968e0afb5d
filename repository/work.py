"""``repository.work.MediaUsageWorkRepository`` (SPEC §3, §5); the module is
``media_usage_worker.repository.work``."""

from media_usage_worker.repository.work import MediaUsageWorkRepository

__all__ = ["MediaUsageWorkRepository"]
