"""``tasks.reconcile``: the reconciliation tick by the module path it once had.

It is defined in ``media_usage_worker.tasks.reconciliation``.
"""

from media_usage_worker.tasks.reconciliation import reconcile_tick

__all__ = ["reconcile_tick"]
