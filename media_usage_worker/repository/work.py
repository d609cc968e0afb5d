"""``MediaUsageWorkRepository``: the durable work table, a port of emdash 0.34.0's repository.

The seed keeps every work-table statement in one repository; here each concern has its own
module and this class joins them, so callers keep the seed's one object:

- ``work_processing``: due selection, claim, complete, retry, fail, lease renewal;
- ``work_operator``: the operator's listing and ``work retry``;
- ``work_rescan``: what reconciliation and repair write.

"Now" is always the database's clock (``repository.clock``); arguments are validated before
any I/O (docs/design.md §3).
"""

from __future__ import annotations

from media_usage_worker.repository.work_operator import OperatorWork
from media_usage_worker.repository.work_processing import BatchWork, ProcessingWork
from media_usage_worker.repository.work_rescan import RescanWork


class MediaUsageWorkRepository(ProcessingWork, BatchWork, OperatorWork, RescanWork):
    """All SQL of the work table. Methods mirror the seed's, in snake_case with keywords."""
