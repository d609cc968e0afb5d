"""``MediaUsageWorkRepository``: the durable work table, a port of emdash 0.34.0's repository.

emdash keeps every work-table statement in one repository object; here each concern has its
own module and this class joins them, so callers keep that one object:

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
    """All SQL of the work table. Methods mirror emdash's, in snake_case with keywords."""
