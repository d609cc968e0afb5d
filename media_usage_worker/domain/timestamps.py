"""Arithmetic on the subsystem's sortable text timestamps (values come from the database)."""

from __future__ import annotations

from datetime import datetime

SORTABLE_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def seconds_between(earlier: str, later: str) -> float:
    """``later - earlier`` in seconds, for two ``YYYY-MM-DDTHH:MM:SS.sssZ`` texts."""
    start = datetime.strptime(earlier, SORTABLE_FORMAT)
    end = datetime.strptime(later, SORTABLE_FORMAT)
    return (end - start).total_seconds()
