"""``tasks.dispatch.after_write``, for hosts that import this project.

Hosts that would rather not import it send ``media_usage.after_write`` by name (see
``docs/operations.md``, "Beside an existing Celery app"). The code lives in
``media_usage_worker.tasks.dispatch``; every name this module has offered stays here.
"""

from media_usage_worker.tasks.dispatch import (
    BATCH_PRIORITY,
    ITEM_PRIORITY,
    after_write,
    queued_messages,
    release,
    send,
)

__all__ = ["BATCH_PRIORITY", "ITEM_PRIORITY", "after_write", "queued_messages", "release", "send"]
