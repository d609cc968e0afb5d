"""``tasks.reconcile``: the reconciliation tick by the module path it once had.

It is defined in ``media_usage_worker.tasks.reconcile``.
"""

from media_usage_worker.tasks.reconcile import reconcile_tick

__all__ = ["reconcile_tick"]
