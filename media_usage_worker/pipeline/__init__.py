"""The orchestration layer: the flows that call the repositories (docs/design.md §9).

Processing one item (``process``), the tick's fan-out (``fan_out``), the lease keeper
(``lease_keeper``), one entry's refresh (``refresh``), manual repair (``repair``) and the
reconciliation steps (``reconciliation``). Every statement these run is a repository function;
this package holds the order and the decisions, and imports no SQLAlchemy beyond the
``Engine``/``Connection`` types its callers hand it.
"""
