"""The database as the edges (CLI, HTTP API, console, demo) meet it first: opening it for one
command or server, its migrations, and whether it is ready to answer.

Opening and migrating are the data layer's own statements, named here so that the edges depend
on the pipeline and the read API only (an import contract keeps them off ``repository``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from media_usage_worker.repository.base.db import (
    create_engine,
    parse_database_url,
    read_transaction,
    refuse_missing_sqlite_file,
)
from media_usage_worker.repository.lifecycle.activation import is_activation_active
from media_usage_worker.repository.migration.migrate import (
    UNREADABLE,
    check_revision,
    current_revision,
    downgrade,
    open_migrated,
    schema_problem,
    upgrade,
    upgrade_plan,
)
from media_usage_worker.repository.registry.host_sources import built_in_gaps

if TYPE_CHECKING:
    from sqlalchemy import Engine

__all__ = [
    "UNREADABLE",
    "Readiness",
    "check_revision",
    "create_engine",
    "current_revision",
    "downgrade",
    "open_migrated",
    "parse_database_url",
    "readiness",
    "refuse_missing_sqlite_file",
    "upgrade",
    "upgrade_plan",
]


@dataclass(frozen=True)
class Readiness:
    """Whether the database can answer: ``problem`` is None when it is reachable and migrated
    (it starts with ``UNREADABLE`` when it cannot be read at all); then the capture state, and
    each built-in source that is not indexed as its table is now, with the reason."""

    problem: str | None
    capture_active: bool | None = None
    sources_not_indexed: tuple[tuple[str, str], ...] = ()

    @property
    def ready(self) -> bool:
        return self.problem is None


def readiness(engine: Engine) -> Readiness:
    problem = schema_problem(engine)
    if problem is not None:
        return Readiness(problem)
    with read_transaction(engine) as conn:
        active = is_activation_active(conn)
        gaps = built_in_gaps(conn)
    return Readiness(None, active, tuple((source.label, why) for source, why in gaps.items()))
