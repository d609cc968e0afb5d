"""A real network partition: PostgreSQL and Redis run on this host, two worker "hosts" run in
network namespaces joined to it by veth links. While a host application writes, one worker
host is cut off from PostgreSQL for longer than a lease, then from Redis, then from both, and
healed each time; then its links get latency and loss where the kernel has ``tc netem``. The
other host keeps working. Afterwards the index matches the content exactly, nothing is left
leased, and the audit finds no write from a lease that had run out.

PostgreSQL only: a SQLite database is a file on the worker's own host, with no network to cut.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from media_usage_worker.api import MediaUsage
from media_usage_worker.pipeline.capture import activate
from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.repository.migration.migrate import upgrade
from media_usage_worker.sample_content import create_sample_collections
from tests.chaos import audit, network
from tests.chaos.pipeline import quiet, work_by_state
from tests.chaos.writer import ContentWriter
from tests.index_oracle import actual_index, expected_index
from tests.processes import Processes, wait_for
from tests.servers import PostgresServer, RedisServer, start_or_skip

LEASE_SECONDS = 5
# Each cut outlasts a lease (and the dispatch TTL), so the cut host's items are taken over.
CUT_SECONDS = 2 * LEASE_SECONDS + 2
MAX_ENTRIES = 20_000


@pytest.fixture
def hosts(dialect: str) -> Iterator[network.Network]:
    if dialect == "sqlite":
        pytest.skip("a SQLite database is a local file: there is no network to partition")
    why_not = network.available()
    if why_not is not None:
        pytest.skip(f"no network namespaces here: {why_not}")
    made = network.Network(2)
    yield made
    made.close()


@pytest.fixture
def servers(hosts: network.Network) -> Iterator[tuple[PostgresServer, RedisServer]]:
    trusted = (f"{network.SUBNET}.0.0/16",)
    postgres = start_or_skip(
        lambda: PostgresServer(listen="*", trusted_networks=trusted), "PostgreSQL"
    )
    redis_server = start_or_skip(lambda: RedisServer(bind="0.0.0.0"), "Redis")
    yield postgres, redis_server
    redis_server.stop()
    postgres.stop()


def _urls(postgres: PostgresServer, redis_server: RedisServer, host: str, redis_host: str):
    database = f"postgresql+psycopg://postgres@{host}:{postgres.port}/chaos"
    return database, f"redis://{redis_host}:{redis_server.port}/0"


@pytest.mark.timeout(900)
def test_a_partitioned_worker_host_writes_nothing_stale(
    hosts: network.Network, servers, tmp_path: Path
) -> None:
    postgres, redis_server = servers
    admin = create_engine(postgres.admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql("CREATE DATABASE chaos")
    admin.dispose()
    local_db, local_redis = _urls(postgres, redis_server, "127.0.0.1", "127.0.0.1")
    upgrade(local_db)
    engine = create_engine(local_db)
    create_sample_collections(engine)
    activate(engine)
    audit.install(engine)

    fleet = Processes(
        {
            "MEDIA_USAGE_TICK_SECONDS": "1",
            "MEDIA_USAGE_RECONCILE_SECONDS": "1",
            "MEDIA_USAGE_RECONCILE_DEFER_SECONDS": "1",
            "MEDIA_USAGE_LEASE_SECONDS": str(LEASE_SECONDS),
            "MEDIA_USAGE_MAX_QUEUED": "150",
        },
        tmp_path,
    )
    try:
        # Beat on this host; one worker on each namespace host, over its own links.
        fleet.env.update(MEDIA_USAGE_DATABASE_URL=local_db, MEDIA_USAGE_BROKER_URL=local_redis)
        fleet.beat()
        logs: list[Path] = []
        for host in hosts.hosts:
            db_url, broker = _urls(
                postgres, redis_server, host.address_of("pg"), host.address_of("rd")
            )
            fleet.env.update(MEDIA_USAGE_DATABASE_URL=db_url, MEDIA_USAGE_BROKER_URL=broker)
            logs.append(fleet.next_log("worker"))
            fleet.worker(concurrency=2, prefix=host.command_prefix())
        wait_for(lambda: quiet(engine), timeout=120, interval=0.5)

        writer = ContentWriter(local_db, MAX_ENTRIES, per_second=20)
        writer.start()
        cut_off = hosts.hosts[0]
        phases: list[dict[str, object]] = []

        def partition(name: str, cut: Callable[[], None], heal: Callable[[], None]) -> None:
            created = writer.created
            cut()
            started = time.monotonic()
            # The rest of the system works meanwhile: the healthy host indexes new writes.
            assert not writer.stop.wait(CUT_SECONDS), "the writer stopped"
            heal()
            phases.append({"phase": name, "seconds": round(time.monotonic() - started, 1),
                           "entries_written_meanwhile": writer.created - created})  # fmt: skip
            assert not writer.stop.wait(3)  # healed, before the next cut

        assert not writer.stop.wait(3)
        partition("cut from PostgreSQL", lambda: hosts.cut(cut_off, "pg"),
                  lambda: hosts.heal(cut_off, "pg"))  # fmt: skip
        partition("cut from Redis", lambda: hosts.cut(cut_off, "rd"),
                  lambda: hosts.heal(cut_off, "rd"))  # fmt: skip
        partition("cut from both", lambda: hosts.cut(cut_off, "pg", "rd"),
                  lambda: hosts.heal(cut_off, "pg", "rd"))  # fmt: skip
        netem = hosts.degrade(cut_off, delay_ms=80, loss_percent=5)
        if netem is None:
            assert not writer.stop.wait(CUT_SECONDS)
            hosts.restore(cut_off)
        phases.append({"phase": "latency 80 ms and 5 % loss", "skipped": netem})
        # A steady round: while the site keeps writing, the clean-up's answer is known (the
        # queued writes are read, not waited for).
        wait_for(lambda: MediaUsage(engine).unused().known, timeout=120, interval=0.2)
        assert writer.is_alive() and writer.error is None, "the writer stopped before the end"
        writer.stop.set()
        writer.join(timeout=60)
        assert writer.error is None, writer.error

        stopped = time.monotonic()
        wait_for(lambda: quiet(engine), timeout=300, interval=1)
        quiesce = time.monotonic() - stopped
        left = work_by_state(engine)
        report = audit.check(engine, tolerance_ms=50)
        expected, actual = expected_index(engine), actual_index(engine)
        with engine.connect() as conn:
            leased = conn.execute(
                sa.text("SELECT count(*) FROM _emdash_media_usage_work WHERE state = 'leased'")
            ).scalar_one()
        figures = {
            "entries_created": writer.created, "edits": writer.edited, "deletes": writer.deleted,
            "phases": phases, "claims": report.claims, "completions": report.completions,
            "index_writes": report.writes, "stale_writes": len(report.stale),
            "lost": len(expected ^ actual), "left_leased": leased,
            "seconds_to_quiesce": round(quiesce, 1),
        }  # fmt: skip
        print("partition figures:", json.dumps(figures))
        (tmp_path / "figures.json").write_text(json.dumps(figures, indent=2))
        assert left == {}, left
        assert leased == 0
        assert report.stale == [], report.stale[:10]
        assert expected == actual
        assert report.completions >= writer.created
        # Both hosts did work: the cut one before, between and after its partitions.
        for log in logs:
            assert "succeeded" in log.read_text(errors="replace"), log
        # Every cut happened while the host application kept writing.
        assert all(p.get("entries_written_meanwhile", 1) for p in phases), phases
    finally:
        fleet.stop_all()
        engine.dispose()
