"""``INSERT ... ON CONFLICT`` for the engine's dialect (both dialects spell it the same way)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite


def insert_factory(engine: sa.Engine | sa.Connection) -> Callable[[sa.Table], Any]:
    """The dialect's ``insert`` construct, which has ``on_conflict_do_update/nothing``."""
    return postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
