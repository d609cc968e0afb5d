"""Every statement of the read API seeks its tables at 100,000 entries, on both dialects.

The site is generated in the database by SQL (100,000 entries, about 470,000 occurrences, a
quarter with drafts, 5 % trashed; a library of 50,000 items), with the statistics the project
keeps (``repository.statistics``). The statements ``MediaUsage`` runs are captured as they
execute and explained with the same parameters: none may scan the sources, the occurrences or
the media library. The same checks run without any statistics too, where the statements'
shape alone must lead the planner to the right index.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from media_usage_worker.api import MediaUsage
from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.repository.base import statistics
from tests.generated_site import generate_site
from tests.support import active_collection, mark_coverage_complete

ENTRIES = 100_000
LIBRARY = 50_000
BIG_TABLES = ("_emdash_media_usage_sources", "_emdash_media_usage", "media")
# A search of a big table must pin one of these: by collection slug or locale alone, it reads
# a whole collection's rows for every row it is asked about.
_SELECTIVE = re.compile(r"\b(media_id|content_id|source_key|id|rowid)=")


@pytest.fixture(scope="module")
def big_site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """One generated site per dialect for the module (generating it is the slow part)."""
    from media_usage_worker.repository.base.db import create_engine
    from media_usage_worker.repository.migration.migrate import upgrade

    dialect = request.param
    name = None
    if dialect == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('plans') / 'site.db'}"
    else:
        databases = request.getfixturevalue("postgres_databases")
        name = databases.create(None)
        url = databases.url_for(name)
    upgrade(url)
    engine = create_engine(url)
    posts = active_collection(engine, "posts", [FieldDefinition("hero", "Hero", "image")])
    generate_site(engine, posts.id, "posts", ENTRIES, LIBRARY)
    mark_coverage_complete(engine)
    yield engine
    engine.dispose()
    if name is not None:
        request.getfixturevalue("postgres_databases").drop(name)


def _captured(engine: sa.Engine, call: Callable[[], Any]) -> list[tuple[str, Any]]:
    seen: list[tuple[str, Any]] = []

    def record(conn, cursor, statement, parameters, context, executemany) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "WITH")):
            seen.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        call()
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    return seen


def _scans(engine: sa.Engine, statement: str, parameters: Any) -> list[str]:
    """The steps of the statement's plan that read a big table whole, or search it by a
    column that does not pick out a few rows."""
    with engine.connect() as conn:
        driver = conn.connection.driver_connection
        assert driver is not None
        cursor = driver.cursor()
        if engine.dialect.name == "sqlite":
            owner = dict(
                cursor.execute("SELECT name, tbl_name FROM sqlite_master WHERE type = 'index'")
            )
            cursor.execute(f"EXPLAIN QUERY PLAN {statement}", parameters)
            return [d for (*_, d) in cursor.fetchall() if _bad_sqlite_step(d, owner)]
        cursor.execute(f"EXPLAIN (FORMAT JSON) {statement}", parameters)
        (plan,) = cursor.fetchone()
        plan = plan if isinstance(plan, list) else json.loads(plan)
        found: list[str] = []

        def walk(node: dict) -> None:
            if node.get("Node Type") == "Seq Scan" and node.get("Relation Name") in BIG_TABLES:
                found.append(f"Seq Scan on {node['Relation Name']}")
            for child in node.get("Plans", []):
                walk(child)

        walk(plan[0]["Plan"])
        return found


# The statements' aliases of the sources table.
_ALIASES = {"draft", "trashed", *BIG_TABLES}
_STEP = re.compile(r"^(SCAN|SEARCH) (\S+)(?: USING (?:COVERING )?INDEX (\S+))?")


def _bad_sqlite_step(detail: str, owner: dict[str, str]) -> bool:
    step = _STEP.match(detail)
    if step is None:
        return False
    kind, name, index = step.groups()
    table = owner.get(index, name) if index else name
    if table not in BIG_TABLES and name not in _ALIASES:
        return False
    return kind == "SCAN" or not _SELECTIVE.search(detail)


CALLS: dict[str, Callable[[MediaUsage], Any]] = {
    "usage_count": lambda api: api.usage_count("media-123"),
    "usage_counts of 1,000 ids": lambda api: api.usage_counts(
        [f"media-{i * 37 % LIBRARY}" for i in range(1000)]
    ),
    "usage page": lambda api: api.usage("media-123", limit=5),
    "a deep usage page": lambda api: api.usage(
        "media-123", limit=5, cursor=api.usage("media-123", limit=5).next_cursor
    ),
    "is_unused": lambda api: api.is_unused("media-49999"),
    "coverage": lambda api: api.coverage(),
    "status": lambda api: api.status(),
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("big_site", ["sqlite", "postgresql"], indirect=True)
@pytest.mark.parametrize("stats", ["with statistics", "without statistics"])
def test_no_read_statement_scans_a_big_table(big_site: sa.Engine, stats: str) -> None:
    with big_site.begin() as conn:
        if stats == "without statistics":
            if big_site.dialect.name == "sqlite":
                conn.exec_driver_sql("DROP TABLE IF EXISTS sqlite_stat1")
            else:
                pytest.skip("PostgreSQL always has statistics (autovacuum and the defaults)")
    big_site.dispose()  # a connection keeps the statistics it loaded with the schema
    if stats == "with statistics":
        statistics.refresh(big_site)
    api = MediaUsage(big_site)
    scans = {}
    for name, call in CALLS.items():
        statements = _captured(big_site, lambda call=call: call(api))
        assert statements, name
        found = [scan for sql, params in statements for scan in _scans(big_site, sql, params)]
        if found:
            scans[name] = found
    assert scans == {}, json.dumps(scans, indent=1)


def test_statistics_follow_the_tables_as_they_grow(db: sa.Engine) -> None:
    posts = active_collection(db, "posts", [FieldDefinition("hero", "Hero", "image")])
    if db.dialect.name == "postgresql":
        assert statistics.refresh_if_grown(db) is False  # autovacuum's job there
        return
    assert statistics.refresh_if_grown(db) is False  # nothing grew since the migration
    with db.begin() as conn:
        conn.exec_driver_sql(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000) "
            "INSERT INTO _emdash_media_usage_sources (source_key, source_type, collection_slug,"
            " content_id, source_variant, current_generation, collection_id, identity_version)"
            f" SELECT 'k' || i, 'content', 'posts', 'e' || i, 'columns', 'g', '{posts.id}', 1"
            " FROM n"
        )
    assert statistics.refresh_if_grown(db) is True
    with db.connect() as conn:
        described = (
            conn.exec_driver_sql(
                "SELECT stat FROM sqlite_stat1 WHERE tbl = '_emdash_media_usage_sources'"
            )
            .scalars()
            .all()
        )
    assert described and max(int(s.split()[0]) for s in described) > 2000  # a sample
    assert statistics.refresh_if_grown(db) is False  # fresh again
