"""An operator's retry of one entry's work (``media-usage work retry``, ``POST
/v1/work/retry``): its failed or lost work row made due again, and the collection's coverage out
of ``complete`` until the retry has run.

The retry is the data layer's guarded statements (``repository.work_queue.work_operator``),
named here so the edges reach it through the pipeline.
"""

from __future__ import annotations

from media_usage_worker.domain.work import OperatorRetryResult
from media_usage_worker.repository.work_queue.work_operator import (
    retry_operator_work,
    retry_refusal,
)

__all__ = ["OperatorRetryResult", "retry_operator_work", "retry_refusal"]
