"""The start both message tests share: sample collections, capture active, the audit installed,
a worker and a beat running, and the activation's reconciliation done."""

from __future__ import annotations

import subprocess

import sqlalchemy as sa

from media_usage_worker.pipeline.capture import activate
from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.repository.reconciling.status import overview
from media_usage_worker.sample_content import create_sample_collections
from tests.chaos import audit
from tests.processes import Processes, wait_for


def start_audited_pipeline(url: str, fleet: Processes) -> tuple[sa.Engine, subprocess.Popen]:
    """Returns the engine and the worker; from here on, each new entry is exactly one claim."""
    engine = create_engine(url)
    create_sample_collections(engine)
    activate(engine)
    audit.install(engine)
    worker = fleet.worker(concurrency=2)
    fleet.beat()
    wait_for(lambda: quiet(engine), timeout=120, interval=0.5)
    return engine, worker


def work_by_state(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return dict(
            conn.execute(
                sa.text("SELECT state, count(*) FROM _emdash_media_usage_work GROUP BY state")
            ).all()
        )


def quiet(engine: sa.Engine) -> bool:
    """Nothing but failed work is left and every collection's coverage is complete."""
    if any(state != "failed" for state in work_by_state(engine)):
        return False
    _, _, details = overview(engine)
    return all(d.coverage == "complete" for d in details)


def reconciled(engine: sa.Engine) -> bool:
    """Every collection's reconciliation has ended: indexed whole but for queued writes."""
    with engine.connect() as conn:
        waiting = conn.execute(
            sa.text(
                "SELECT count(*) FROM _emdash_media_usage_index_status "
                "WHERE capture_state = 'active' AND reconciliation_required <> 0"
            )
        ).scalar_one()
    return waiting == 0
