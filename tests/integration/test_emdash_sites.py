"""Adopting databases emdash's own code made (tests/fixtures/emdash): ``db upgrade`` adds what
emdash's tables lack, activation and a reconciliation index the site, and every media item's
uses agree with a truth computed here from the rows themselves."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import sqlalchemy as sa

from media_usage_worker.api import MediaUsage
from media_usage_worker.pipeline.capture import activate
from media_usage_worker.repository.base.db import create_engine
from media_usage_worker.repository.migration.adoption import adoption_plan
from media_usage_worker.repository.migration.migrate import upgrade
from tests.emdash_truth import truly_used
from tests.integration.test_sources import settle

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "emdash"
SITES = ("site-0.32.db", "site-0.34.0-inactive.db", "site-0.34.0.db")


@pytest.fixture(params=SITES)
def emdash_site(request, tmp_path) -> sa.Engine:
    path = tmp_path / request.param
    shutil.copy(FIXTURES / request.param, path)
    path.chmod(0o600)
    engine = create_engine(f"sqlite:///{path}")
    yield engine
    engine.dispose()


def test_db_upgrade_adopts_emdash_tables_and_the_index_agrees_with_the_rows(
    emdash_site,
) -> None:
    adopted = upgrade(emdash_site)
    with emdash_site.connect() as conn:
        assert adoption_plan(conn) == []  # nothing left to add
    assert upgrade(emdash_site) == []  # a second run changes nothing
    if "0.32" in str(emdash_site.url):
        assert {a.table for a in adopted} >= {
            "_emdash_media_usage_index_status", "_emdash_media_usage_sources",
        }  # fmt: skip
    activate(emdash_site)
    settle(emdash_site)
    library, used = truly_used(emdash_site)
    assert used and library - used, "the fixture has used and unused items"
    index = MediaUsage(emdash_site)
    page = index.unused(limit=100)
    assert page.known
    assert {item.id for item in page.items} == library - used
    for media_id in sorted(used):
        assert index.usage(media_id).entries, media_id


def test_the_user_avatar_emdash_stores_as_a_url_is_a_use(emdash_site) -> None:
    upgrade(emdash_site)
    activate(emdash_site)
    settle(emdash_site)
    with emdash_site.connect() as conn:
        url = conn.execute(sa.text("SELECT avatar_url FROM users")).scalar_one()
        avatar = conn.execute(
            sa.text("SELECT id FROM media WHERE :u LIKE '%/' || storage_key"), {"u": url}
        ).scalar_one()
    kinds = {entry.kind for entry in MediaUsage(emdash_site).usage(avatar).entries}
    assert "user" in kinds
    assert MediaUsage(emdash_site).retire([avatar]).refused == {avatar: "used"}


def db_cli(url: str, *args: str):
    from click.testing import CliRunner

    from media_usage_worker.cli import main

    return CliRunner().invoke(main, ["db", *args, "--database-url", url])


def test_db_upgrade_check_prints_the_plan_and_changes_nothing(tmp_path) -> None:
    path = tmp_path / "site.db"
    shutil.copy(FIXTURES / "site-0.32.db", path)
    path.chmod(0o600)
    url = f"sqlite:///{path}"
    before = path.read_bytes()
    planned = db_cli(url, "upgrade", "--check")
    assert planned.exit_code == 0, planned.output
    assert "migrations to apply: 0001_core_content_registry," in planned.output
    assert (
        "_emdash_media_usage_index_status: adds 5 column(s) (collection_id, change_epoch, "
        "reconciliation_required, last_incremental_success_at, capture_state)" in planned.output
    )
    assert path.read_bytes() == before
    done = db_cli(url, "upgrade")
    assert done.exit_code == 0, done.output
    assert "_emdash_media_usage_index_status: added 5 column(s)" in done.output
    again = db_cli(url, "upgrade", "--check")
    assert "migrations to apply: none" in again.output
    assert "existing tables: nothing to add" in again.output


def test_a_table_that_cannot_be_adopted_is_one_error_and_no_change(tmp_path) -> None:
    path = tmp_path / "site.db"
    shutil.copy(FIXTURES / "site-0.32.db", path)
    path.chmod(0o600)
    url = f"sqlite:///{path}"
    engine = create_engine(url)
    with engine.begin() as conn:  # a host's own column of that name, holding text
        conn.execute(sa.text(
            "ALTER TABLE _emdash_media_usage_index_status ADD COLUMN change_epoch TEXT"
        ))  # fmt: skip
    engine.dispose()
    before = path.read_bytes()
    refused = db_cli(url, "upgrade")
    assert refused.exit_code != 0
    assert (
        "Table _emdash_media_usage_index_status: column change_epoch holds text values"
        in refused.output
    )
    assert "nothing was changed" in refused.output
    assert path.read_bytes() == before


def emdash_032_statements() -> list[str]:
    """emdash 0.32's own DDL of its media usage tables, read from the database it made."""
    with sa.create_engine(f"sqlite:///{FIXTURES / 'site-0.32.db'}").connect() as conn:
        return list(
            conn.execute(
                sa.text("SELECT sql FROM sqlite_master WHERE name LIKE '%emdash_media_usage%' "
                        "AND sql IS NOT NULL ORDER BY type DESC, name")
            ).scalars()
        )  # fmt: skip


def test_emdash_032_tables_are_adopted_on_both_dialects(engine, dialect) -> None:
    """The tables as emdash 0.32's SQL creates them (on PostgreSQL its SQLite clock default
    becomes PostgreSQL's), then ``db upgrade``, activation and an entry indexed."""
    with engine.begin() as conn:
        for statement in emdash_032_statements():
            if dialect == "postgresql":
                statement = statement.replace(
                    "(datetime('now'))", "(to_char(now(), 'YYYY-MM-DD HH24:MI:SS'))"
                )
            conn.execute(sa.text(statement))
    adopted = {a.table: a for a in upgrade(engine)}
    assert "capture_state" in adopted["_emdash_media_usage_index_status"].columns
    assert "identity_version" in adopted["_emdash_media_usage_sources"].columns
    with engine.connect() as conn:
        assert adoption_plan(conn) == []
    from media_usage_worker.domain.content_model import FieldDefinition
    from media_usage_worker.repository.base.schema import media
    from media_usage_worker.repository.registry.collections import create_collection
    from tests.support import drain

    with engine.begin() as conn:
        conn.execute(media.insert(), [
            {"id": i, "filename": f"{i}.png", "mime_type": "image/png", "storage_key": f"{i}.png"}
            for i in ("m1", "m2")
        ])  # fmt: skip
    create_collection(engine, "posts", "Posts", [FieldDefinition("hero", "Hero", "image")])
    activate(engine)
    settle(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO ec_posts (id, hero) VALUES ('p1', 'm1')"))
    drain(engine)
    assert [item.id for item in MediaUsage(engine).unused().items] == ["m2"]


# emdash's SQLite clock defaults and byte type, in PostgreSQL's words.
_POSTGRES_WORDS = {
    '" blob ': '" bytea ',
    "(datetime('now'))": "(to_char(now(), 'YYYY-MM-DD HH24:MI:SS'))",
    "(strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))": (
        "(to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'))"
    ),
}


def copy_to_postgres(site: Path, engine: sa.Engine) -> None:
    """Every table and index of a database emdash's code made, created on PostgreSQL by
    emdash's own DDL (its clock defaults and byte type in PostgreSQL's words), and every row
    copied. emdash's capture triggers are SQLite's and are left out: activation installs
    this project's."""
    source = sa.create_engine(f"sqlite:///{site}")
    with source.connect() as lite:
        ddl = lite.execute(
            sa.text("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
                    "AND type IN ('table', 'index') AND name NOT LIKE 'sqlite_%' "
                    "ORDER BY type DESC, rowid")
        ).all()  # fmt: skip
        data = {
            name: lite.execute(sa.text(f'SELECT * FROM "{name}"')).mappings().all()
            for kind, name, _ in ddl
            if kind == "table"
        }
    source.dispose()
    with engine.begin() as conn:
        # Rows arrive in table order, not in the order their foreign keys need.
        conn.execute(sa.text("SET LOCAL session_replication_role = replica"))
        for _, _, statement in ddl:
            for lite, words in _POSTGRES_WORDS.items():
                statement = statement.replace(lite, words)
            conn.execute(sa.text(statement.replace(":", r"\:")))
        for name, rows in data.items():
            if rows:
                columns = list(rows[0].keys())
                quoted = ", ".join(f'"{c}"' for c in columns)
                marks = ", ".join(f":p{i}" for i in range(len(columns)))
                conn.execute(
                    sa.text(f'INSERT INTO "{name}" ({quoted}) VALUES ({marks})'),
                    [{f"p{i}": row[c] for i, c in enumerate(columns)} for row in rows],
                )


@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("dialect", ["postgresql"], indirect=True)
def test_a_site_emdash_made_is_adopted_on_postgresql(engine, site) -> None:
    copy_to_postgres(FIXTURES / site, engine)
    upgrade(engine)
    with engine.connect() as conn:
        assert adoption_plan(conn) == []
    activate(engine)
    settle(engine)
    library, used = truly_used(engine)
    assert used and library - used
    index = MediaUsage(engine)
    page = index.unused(limit=100)
    assert page.known and {item.id for item in page.items} == library - used
    for media_id in sorted(library):
        assert bool(index.usage(media_id).entries) == (media_id in used), media_id
