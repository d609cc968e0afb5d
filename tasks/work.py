"""``tasks.work``: the tick, per-item, batch and host tasks by the module path they once had.

They are defined in ``media_usage_worker.tasks.work``.
"""

from media_usage_worker.tasks.work import after_write, process_batch, process_work, tick

__all__ = ["after_write", "process_batch", "process_work", "tick"]
