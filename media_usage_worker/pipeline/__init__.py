"""The orchestration layer: the flows that call the repositories (docs/design.md §9).

Each module is one flow:

- ``fan_out``: the tick, reading due work and handing it to the sender;
- ``batch`` and ``process``: a batch of work items (``process`` is a batch of one), and
  ``settle``, how each item ends; ``lease_keeper`` keeps their leases alive meanwhile;
- ``refresh``: one entry's (or a batch's) slice of the index;
- ``reconciliation``: the steps that bring coverage back to ``complete``; ``repair``, the
  synchronous rescan;
- ``deletion``: deleting a collection;
- ``cleanup`` and ``purge``: the clean-up (unused listing, retire, restore) and the purge.

Every statement these run is a repository function; this package holds the order and the
decisions, and imports no SQLAlchemy beyond the ``Engine``/``Connection`` types its callers
hand it.
"""
