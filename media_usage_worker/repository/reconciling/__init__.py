"""Whether the index can be trusted: coverage transitions, reconciliation runs, repairs, and
the operator's overview of them."""
