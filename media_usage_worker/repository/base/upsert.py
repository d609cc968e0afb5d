"""``INSERT ... ON CONFLICT`` for the engine's dialect (both dialects spell it the same way)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite


def insert_factory(engine: sa.Engine | sa.Connection) -> Callable[[sa.Table], Any]:
    """The dialect's ``insert`` construct, which has ``on_conflict_do_update/nothing``."""
    return insert_factory_for(engine.dialect.name)


def insert_factory_for(dialect_name: str) -> Callable[[sa.Table], Any]:
    """``insert_factory`` by dialect name (for statements built once per dialect)."""
    return postgresql.insert if dialect_name == "postgresql" else sqlite.insert
