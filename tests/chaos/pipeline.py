"""The start both message tests share: sample collections, capture active, the audit installed,
a worker and a beat running, and the activation's reconciliation done."""

from __future__ import annotations

import subprocess

import sqlalchemy as sa

from repository.activation import activate
from repository.db import create_engine
from repository.sample_content import create_sample_collections
from tests.acceptance.conftest import Processes, wait_for
from tests.chaos import audit
from tests.chaos.test_chaos_drain import _quiet


def start_audited_pipeline(url: str, fleet: Processes) -> tuple[sa.Engine, subprocess.Popen]:
    """Returns the engine and the worker; from here on, each new entry is exactly one claim."""
    engine = create_engine(url)
    create_sample_collections(engine)
    activate(engine)
    audit.install(engine)
    worker = fleet.worker(concurrency=2)
    fleet.beat()
    wait_for(lambda: _quiet(engine), timeout=120, interval=0.5)
    return engine, worker
