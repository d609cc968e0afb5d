"""Coverage aggregation (docs/design.md §5, §11): only ``complete`` may answer "used nowhere"."""

from __future__ import annotations

from collections.abc import Sequence

from media_usage_worker.domain.vocabulary import CoverageStatus

KNOWN = frozenset(
    {
        CoverageStatus.NEVER,
        CoverageStatus.RUNNING,
        CoverageStatus.PARTIAL,
        CoverageStatus.FAILED,
        CoverageStatus.STALE,
    }
)
# The first of these present decides a mixed aggregate.
_DECIDING = (
    CoverageStatus.UNKNOWN,
    CoverageStatus.RUNNING,
    CoverageStatus.STALE,
    CoverageStatus.PARTIAL,
)


def scope_status(
    status: str | None,
    reconciliation_required: int | None,
    schema_version: int | None,
    rules_current: bool = True,
) -> CoverageStatus:
    """One collection's coverage as the read side reports it: ``complete`` only while nothing
    is left to reconcile and the index was computed under the running rules."""
    if status is None:
        return CoverageStatus.NEVER
    if status == CoverageStatus.COMPLETE:
        if reconciliation_required or schema_version != 1 or not rules_current:
            return CoverageStatus.STALE
        return CoverageStatus.COMPLETE
    return CoverageStatus(status) if status in KNOWN else CoverageStatus.UNKNOWN


def with_gap(status: CoverageStatus, gap: str | None) -> CoverageStatus:
    """A scope's coverage once a gap in what it reads is known: never ``complete`` over it."""
    if gap is not None and status == CoverageStatus.COMPLETE:
        return CoverageStatus.STALE
    return status


def aggregate(statuses: Sequence[str]) -> CoverageStatus:
    if all(s == CoverageStatus.COMPLETE for s in statuses):
        return CoverageStatus.COMPLETE
    for status in _DECIDING:
        if status in statuses:
            return status
    if all(s == CoverageStatus.NEVER for s in statuses):
        return CoverageStatus.NEVER
    if all(s == CoverageStatus.FAILED for s in statuses):
        return CoverageStatus.FAILED
    return CoverageStatus.PARTIAL
