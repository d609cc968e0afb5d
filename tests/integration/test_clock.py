"""The database clock: one statement writes one instant, however long it runs (both dialects)."""

from __future__ import annotations

import re

import sqlalchemy as sa

from media_usage_worker.repository.base.clock import db_now
from tests.support import SORTABLE

# Keeps the database busy for some tens of milliseconds between two reads of "now" in one
# statement: with a per-call wall clock (emdash's clock_timestamp()) the two would differ.
_BUSY = sa.literal_column(
    "(WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000) "
    "SELECT count(*) FROM c)"
)


def test_one_statement_writes_one_instant_into_every_column(db: sa.Engine) -> None:
    with db.connect() as conn:
        first, busy, last, later = conn.execute(
            sa.select(db_now(), _BUSY, db_now(), db_now(60))
        ).one()
    assert busy == 200000
    assert re.fullmatch(SORTABLE, first)
    assert first == last
    assert later > first  # the offset still applies to that one instant
