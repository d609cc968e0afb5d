"""``MediaUsageWorkRepository``: the work table as one object, the API emdash's repository has.

The statements are module functions over a bind (an engine, or a connection whose transaction
they join), one module per concern:

- ``work_processing``: due selection, claim, complete, retry, fail, lease renewal, batches;
- ``work_operator``: the operator's listing and ``work retry``;
- ``work_rescan``: what reconciliation and repair write.

This class only binds them to one engine or connection, for hosts and scripts that hold the
object; the project's own code calls the functions. "Now" is always the database's clock
(``repository.clock``); arguments are validated before any I/O (docs/design.md §3).
"""

from __future__ import annotations

from media_usage_worker.repository.base.db import Bind, on_bind
from media_usage_worker.repository.work_queue import work_operator, work_processing, work_rescan


class MediaUsageWorkRepository:
    """All SQL of the work table over one bind. Methods mirror emdash's, in snake_case with
    keywords; each is the module function of the same name."""

    def __init__(self, bind: Bind) -> None:
        self.bind = bind

    find_due_work = on_bind(work_processing.find_due_work)
    find_due_page = on_bind(work_processing.find_due_page)
    oldest_due = on_bind(work_processing.oldest_due)
    settle_unusable_work = on_bind(work_processing.settle_unusable_work)
    find_work_for_content = on_bind(work_processing.find_work_for_content)
    claim_work = on_bind(work_processing.claim_work)
    complete_work = on_bind(work_processing.complete_work)
    retry_work = on_bind(work_processing.retry_work)
    fail_work = on_bind(work_processing.fail_work)
    release_work = on_bind(work_processing.release_work)
    extend_lease = on_bind(work_processing.extend_lease)
    claim_batch = on_bind(work_processing.claim_batch)
    extend_batch_lease = on_bind(work_processing.extend_batch_lease)
    find_operator_page = on_bind(work_operator.find_operator_page)
    retry_operator_work = on_bind(work_operator.retry_operator_work)
    enqueue_reconciliation_page = on_bind(work_rescan.enqueue_reconciliation_page)
    record_unusable_content = on_bind(work_rescan.record_unusable_content)
    delete_work_through_epoch = on_bind(work_rescan.delete_work_through_epoch)
