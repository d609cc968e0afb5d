"""The pace samples' statements (``domain.pace`` says what they mean)."""

from __future__ import annotations

import sqlalchemy as sa

from media_usage_worker.domain.pace import Pace, Sample, pace_between
from media_usage_worker.domain.vocabulary import CaptureState
from media_usage_worker.repository.base.clock import db_now
from media_usage_worker.repository.base.db import Bind, read_transaction, transaction
from media_usage_worker.repository.base.schema import (
    index_status,
    pace_samples,
    reconciliations,
    work,
)
from media_usage_worker.repository.base.upsert import insert_factory

# A tick samples at most this often; samples older than ``KEEP_SECONDS`` are deleted.
SAMPLE_EVERY_SECONDS = 5
KEEP_SECONDS = 3600
WINDOW_SECONDS = 60

_p, _st, _w, _rc = pace_samples.c, index_status.c, work.c, reconciliations.c
_WRITES = (
    sa.select(sa.func.coalesce(sa.func.sum(_st.change_epoch), 0))
    .where(_st.capture_state == CaptureState.ACTIVE)
    .scalar_subquery()
)
# A running reconciliation's own rows are its backfill, not the site's writes.
_QUEUED = (
    sa.select(sa.func.count())
    .select_from(work)
    .where(
        ~sa.exists(
            sa.select(1).where(
                _rc.collection_id == _w.collection_id,
                _rc.target_epoch.is_not(None),
                _w.change_epoch <= _rc.target_epoch,
            )
        )
    )
    .scalar_subquery()
)
_RECENT = sa.select(1).where(_p.sampled_at > db_now(-SAMPLE_EVERY_SECONDS)).limit(1)
_WINDOW = (
    sa.select(_p.sampled_at, _p.writes, _p.queued)
    .where(_p.sampled_at >= db_now(-WINDOW_SECONDS))
    .order_by(_p.sampled_at)
)


def record_sample(bind: Bind) -> bool:
    """Sample the writes and the queue, unless a sample is younger than
    ``SAMPLE_EVERY_SECONDS``; forget samples older than ``KEEP_SECONDS``. ``True`` if one was
    taken."""
    with transaction(bind) as conn:
        if conn.execute(_RECENT).first() is not None:
            return False
        insert = insert_factory(conn.engine)(pace_samples).from_select(
            ["sampled_at", "writes", "queued"], sa.select(db_now(), _WRITES, _QUEUED)
        )
        conn.execute(insert.on_conflict_do_nothing())
        conn.execute(pace_samples.delete().where(_p.sampled_at < db_now(-KEEP_SECONDS)))
    return True


def read_pace(bind: Bind) -> Pace | None:
    """The pace over the last minute's samples; ``None`` without two samples far enough apart
    (no beat running, or it just started)."""
    with read_transaction(bind) as conn:
        rows = conn.execute(_WINDOW).all()
    if len(rows) < 2:
        return None
    return pace_between(Sample(*rows[0]), Sample(*rows[-1]))


def samples_since(bind: Bind, seconds: int) -> list[Sample]:
    """The samples of the last ``seconds`` (at most an hour is kept), oldest first."""
    window = (
        sa.select(_p.sampled_at, _p.writes, _p.queued)
        .where(_p.sampled_at >= db_now(-seconds))
        .order_by(_p.sampled_at)
    )
    with read_transaction(bind) as conn:
        return [Sample(*row) for row in conn.execute(window)]
