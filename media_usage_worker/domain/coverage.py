"""Coverage aggregation (docs/design.md §5, §11): only ``complete`` may answer "used nowhere"."""

from __future__ import annotations

from collections.abc import Sequence

KNOWN = frozenset({"never", "running", "partial", "failed", "stale"})


def scope_status(
    status: str | None, reconciliation_required: int | None, schema_version: int | None
) -> str:
    """One collection's coverage as the read side reports it."""
    if status is None:
        return "never"
    if status == "complete":
        if reconciliation_required:
            return "stale"
        return "complete" if schema_version == 1 else "stale"
    return status if status in KNOWN else "unknown"


def aggregate(statuses: Sequence[str]) -> str:
    if all(s == "complete" for s in statuses):
        return "complete"
    for status in ("unknown", "running", "stale", "partial"):
        if status in statuses:
            return status
    if all(s == "never" for s in statuses):
        return "never"
    if all(s == "failed" for s in statuses):
        return "failed"
    return "partial"
