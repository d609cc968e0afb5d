"""``repository.work``: the work repository and its record types by their fixed import path.

The code lives in ``media_usage_worker.repository.work_queue.work``; the record types it returns are
defined in ``media_usage_worker.domain.work`` and stay importable from here too.
"""

from media_usage_worker.domain.work import OperatorRetryResult, OperatorWorkItem, Page, WorkRecord
from media_usage_worker.repository.work_queue.work import MediaUsageWorkRepository

__all__ = [
    "MediaUsageWorkRepository",
    "OperatorRetryResult",
    "OperatorWorkItem",
    "Page",
    "WorkRecord",
]
