"""Sources beyond content collections: site settings, user and byline avatars and declared host
tables are captured in the writer's transaction, indexed by the work path, backfilled by
reconciliation and counted by every read; "unused" waits for every source's coverage
(both dialects)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from media_usage_worker.api import MediaUsage
from media_usage_worker.cli import main
from media_usage_worker.domain.policy import Limits
from media_usage_worker.pipeline.capture import activate, deactivate
from media_usage_worker.pipeline.registry import add_media_url_prefix
from media_usage_worker.repository.base.schema import media
from media_usage_worker.repository.lifecycle.triggers import INACTIVE_MESSAGE
from tests.index_oracle import actual_index, expected_index
from tests.support import drain, status_row

FILE_URL = "/_emdash/api/media/file/"
MENU = "menu_items"
MENU_ID = f"source-{MENU}"
MENU_DDL = f"CREATE TABLE {MENU} (id TEXT PRIMARY KEY, items TEXT, link TEXT, label TEXT)"
SCOPES = ("source-options", "source-users", "source-_emdash_bylines")


def sql(engine: sa.Engine, statement: str, **params: object) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(statement), params)


def scalar(engine: sa.Engine, statement: str, **params: object) -> object:
    with engine.connect() as conn:
        return conn.execute(sa.text(statement), params).scalar()


@pytest.fixture
def site(db: sa.Engine) -> Iterator[sa.Engine]:
    """An activated site with a media library, every source's coverage complete."""
    rows = [
        {"id": f"m{n}", "filename": f"f{n}.png", "mime_type": "image/png",
         "storage_key": f"f{n}.png"}
        for n in range(1, 9)
    ]  # fmt: skip
    with db.begin() as conn:
        conn.execute(media.insert(), rows)
    activate(db)
    settle(db)
    yield db


def settle(engine: sa.Engine) -> None:
    """Reconcile and drain (beat and workers, without Celery) until every scope is complete."""
    from media_usage_worker.pipeline.reconciliation import Reconciler

    reconciler = Reconciler(engine, defer_seconds=0)
    for _ in range(50):
        reconciler.tick()
        drain(engine)
        with engine.connect() as conn:
            left = conn.execute(
                sa.text("SELECT count(*) FROM _emdash_media_usage_index_status "
                        "WHERE status <> 'complete'")
            ).scalar_one()  # fmt: skip
        if left == 0:
            return
    raise AssertionError("coverage did not settle")


def unused(engine: sa.Engine, media_id: str) -> bool | None:
    return MediaUsage(engine).is_unused(media_id)


def kinds(engine: sa.Engine, media_id: str) -> set[tuple[str, str]]:
    page = MediaUsage(engine).usage(media_id)
    return {(entry.kind, entry.content_id) for entry in page.entries}


def test_built_in_sources_are_registered_and_complete_after_activation(site) -> None:
    for collection_id in SCOPES:
        assert status_row(site, collection_id)["status"] == "complete"
    assert unused(site, "m1") is True


def test_a_favicon_in_settings_is_a_use_until_it_is_unset(site) -> None:
    sql(site, "INSERT INTO options (name, value) VALUES ('site:favicon', :v)",
        v=json.dumps({"mediaId": "m1", "alt": "icon"}))  # fmt: skip
    # Captured in the writer's transaction: "unused" is not known until the work is done.
    assert status_row(site, "source-options")["status"] == "stale"
    assert unused(site, "m1") is None
    drain(site)
    assert unused(site, "m1") is False
    assert kinds(site, "m1") == {("settings", "site:favicon")}

    sql(site, "UPDATE options SET value = :v WHERE name = 'site:favicon'",
        v=json.dumps({"mediaId": "m2"}))  # fmt: skip
    drain(site)
    assert (unused(site, "m1"), unused(site, "m2")) == (True, False)
    sql(site, "DELETE FROM options WHERE name = 'site:favicon'")
    drain(site)
    assert unused(site, "m2") is True
    assert actual_index(site) == expected_index(site)


def test_settings_references_anywhere_in_the_json_value(site) -> None:
    value = {
        "logo": {"mediaId": "m1"},
        "social": {"image": {"id": "m2", "provider": "local", "src": FILE_URL + "f2.png"}},
        "links": [{"href": "https://example.org/"}, {"icon": FILE_URL + "f3.png"}],
        "note": "m4 is a word here, not a reference",
    }
    sql(site, "INSERT INTO options (name, value) VALUES ('site:seo', :v)", v=json.dumps(value))
    sql(site, "INSERT INTO options (name, value) VALUES ('site:bad', 'not json {')")
    sql(site, "INSERT INTO options (name, value) VALUES ('site:url', :v)",
        v=json.dumps(FILE_URL + "f5.png"))  # fmt: skip
    drain(site)
    usage = MediaUsage(site).usage_counts([f"m{n}" for n in range(1, 7)])
    assert usage.counts == {"m1": 1, "m2": 1, "m3": 1, "m4": 0, "m5": 1, "m6": 0}
    assert actual_index(site) == expected_index(site)


def test_user_and_byline_avatars_are_uses(site) -> None:
    sql(site, "INSERT INTO users (id, email, avatar_id) VALUES ('u1', 'a@example.org', 'm1')")
    sql(site, "INSERT INTO _emdash_bylines (id, slug, display_name, avatar_media_id) "
              "VALUES ('b1', 'ada', 'Ada', 'm2')")  # fmt: skip
    drain(site)
    assert kinds(site, "m1") == {("user", "u1")}
    assert kinds(site, "m2") == {("byline", "b1")}
    # A write to a column the source does not read is not captured.
    sql(site, "UPDATE users SET name = 'Ada' WHERE id = 'u1'")
    assert scalar(site, "SELECT count(*) FROM _emdash_media_usage_work") == 0
    sql(site, "UPDATE users SET avatar_id = NULL")
    # emdash's foreign key clears a byline's avatar when its media row goes.
    sql(site, "UPDATE _emdash_bylines SET avatar_media_id = NULL")
    drain(site)
    assert (unused(site, "m1"), unused(site, "m2")) == (True, True)


def declare(engine: sa.Engine, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        main,
        ["sources", "add", MENU, *args, "--database-url", str(engine.url)],
        catch_exceptions=False,
    )
    return result.exit_code, result.output


def test_a_declared_table_with_existing_rows_is_backfilled_before_coverage_is_complete(
    site,
) -> None:
    sql(site, MENU_DDL)
    sql(site, f"INSERT INTO {MENU} (id, items, link) VALUES ('a', :items, :link)",
        items=json.dumps([{"image": {"mediaId": "m1"}}, {"image": {"mediaId": "m2"}}]),
        link=FILE_URL + "f3.png")  # fmt: skip
    sql(site, f"INSERT INTO {MENU} (id, items, link) VALUES ('b', NULL, 'm4')")
    code, output = declare(site, "--column", "items=json", "--column", "link=url")
    assert code == 0, output
    assert status_row(site, MENU_ID)["status"] == "never"
    assert unused(site, "m1") is None  # not known before the backfill
    settle(site)
    counts = MediaUsage(site).usage_counts(["m1", "m2", "m3", "m4"]).counts
    # A bare word in a URL column is no reference.
    assert counts == {"m1": 1, "m2": 1, "m3": 1, "m4": 0}
    assert kinds(site, "m3") == {(f"table:{MENU}", "a")}
    assert actual_index(site) == expected_index(site)

    listed = CliRunner().invoke(
        main, ["sources", "list", "--json", "--database-url", str(site.url)]
    )
    by_kind = {s["kind"]: s for s in json.loads(listed.output)}
    assert set(by_kind) == {"settings", "user", "byline", f"table:{MENU}"}
    assert by_kind[f"table:{MENU}"]["coverage"] == "complete"
    assert by_kind[f"table:{MENU}"]["columns"] == {"items": "json", "link": "url"}


def test_a_plain_sql_write_from_another_connection_is_captured(site) -> None:
    sql(site, MENU_DDL)
    assert declare(site, "--column", "items=json")[0] == 0
    settle(site)
    # The host's own driver, outside SQLAlchemy: only the trigger can see this write.
    raw = site.raw_connection()
    try:
        cursor = raw.cursor()
        placeholder = "?" if site.dialect.name == "sqlite" else "%s"
        cursor.execute(
            f"INSERT INTO {MENU} (id, items) VALUES ('x', {placeholder})",
            (json.dumps({"mediaId": "m5"}),),
        )
        raw.commit()
    finally:
        raw.close()
    assert scalar(site, "SELECT content_id FROM _emdash_media_usage_work") == "x"
    drain(site)
    assert kinds(site, "m5") == {(f"table:{MENU}", "x")}


def test_a_key_change_captures_the_old_key_too(site) -> None:
    sql(site, MENU_DDL)
    assert declare(site, "--column", "items=json")[0] == 0
    sql(site, f"INSERT INTO {MENU} (id, items) VALUES ('old', :v)",
        v=json.dumps({"mediaId": "m6"}))  # fmt: skip
    settle(site)
    sql(site, f"UPDATE {MENU} SET id = 'new' WHERE id = 'old'")
    drain(site)
    assert kinds(site, "m6") == {(f"table:{MENU}", "new")}
    assert actual_index(site) == expected_index(site)


def test_removing_a_declared_source_leaves_nothing_of_it(site) -> None:
    sql(site, MENU_DDL)
    assert declare(site, "--column", "items=json", "--path", "items[].image")[0] == 0
    sql(site, f"INSERT INTO {MENU} (id, items) VALUES ('a', :v)",
        v=json.dumps([{"image": "m7"}]))  # fmt: skip
    settle(site)
    assert kinds(site, "m7") == {(f"table:{MENU}", "a")}

    result = CliRunner().invoke(main, ["sources", "remove", MENU, "--database-url", str(site.url)])
    assert result.exit_code == 0, result.output
    assert unused(site, "m7") is True
    for table, column in [
        ("_media_usage_worker_sources", "collection_id"),
        ("_emdash_media_usage_sources", "collection_id"),
        ("_emdash_media_usage_work", "collection_id"),
        ("_emdash_media_usage_index_status", "collection_id"),
        ("_emdash_media_usage_reconciliations", "collection_id"),
        ("_media_usage_worker_reference_paths", "collection_id"),
        ("_media_usage_worker_rules_state", "collection_id"),
    ]:
        left = scalar(site, f"SELECT count(*) FROM {table} WHERE {column} = :id", id=MENU_ID)
        assert left == 0, table
    assert scalar(site, "SELECT count(*) FROM _emdash_media_usage "
                        "WHERE source_key LIKE :k", k=f"content:{MENU_ID}:%") == 0  # fmt: skip
    # No trigger is left: a write is neither captured nor refused.
    sql(site, f"INSERT INTO {MENU} (id, items) VALUES ('b', 'x')")
    assert scalar(site, "SELECT count(*) FROM _emdash_media_usage_work") == 0


@pytest.mark.parametrize(
    ("ddl", "args", "says"),
    [
        (None, ["--column", "items=json"], "does not exist"),
        (MENU_DDL, ["--column", "nope=json"], "has no column 'nope'"),
        (MENU_DDL, ["--column", "items=blob"], "unknown kind"),
        (MENU_DDL, ["--column", "Items;drop=json"], "must match"),
        (MENU_DDL, ["--column", "items"], "column=kind"),
        (MENU_DDL, ["--key", "label", "--column", "items=json"], "is not a key"),
        (
            f"CREATE TABLE {MENU} (id INTEGER PRIMARY KEY, items TEXT)",
            ["--column", "items=json"],
            "not text",
        ),
        (
            f"CREATE TABLE {MENU} (id INTEGER PRIMARY KEY, items TEXT)",
            ["--column", "items=json"],
            "of type INTEGER, not text",
        ),
        (MENU_DDL, ["--column", "id=media_id"], "is the key (--key)"),
        (MENU_DDL, ["--column", "items=json", "--column", "items=url"], "named twice"),
        (MENU_DDL, ["--column", "items=json", "--path", "link.x"], "JSON columns"),
        (MENU_DDL, ["--column", "status=media_id"], "standard content column"),
    ],
)
def test_a_source_that_cannot_be_indexed_is_refused_with_one_line(
    site, ddl: str | None, args: list[str], says: str
) -> None:
    if ddl is not None:
        sql(site, ddl.replace("label TEXT", "label TEXT, status TEXT"))
    code, output = declare(site, *args)
    assert code == 2, output
    assert says in output and len(output.strip().splitlines()) <= 2, output
    assert scalar(site, "SELECT count(*) FROM _media_usage_worker_sources "
                        "WHERE kind = 'table'") == 0  # fmt: skip
    assert status_row(site, "source-options")["status"] == "complete"


def test_a_built_in_table_or_a_declared_one_cannot_be_declared_again(site) -> None:
    result = CliRunner().invoke(
        main, ["sources", "add", "users", "--column", "name=media_id",
               "--database-url", str(site.url)],
    )  # fmt: skip
    assert result.exit_code == 2 and "built-in" in result.output
    for table in ("media", "_emdash_media_usage_sources", "revisions"):
        result = CliRunner().invoke(
            main, ["sources", "add", table, "--column", "data=json", "--database-url",
                   str(site.url)],
        )  # fmt: skip
        assert result.exit_code == 2 and "cannot be declared" in result.output, table
    sql(site, MENU_DDL)
    assert declare(site, "--column", "items=json")[0] == 0
    code, output = declare(site, "--column", "link=url")
    assert code == 2 and "declared already" in output


def test_a_value_over_the_limits_fails_with_the_content_code(site) -> None:
    sql(site, "INSERT INTO options (name, value) VALUES ('huge', :v)",
        v=json.dumps([{"mediaId": f"m{n}"} for n in range(50)]))  # fmt: skip
    drain(site, limits=Limits(max_occurrences=10))
    row = scalar(site, "SELECT last_error_code FROM _emdash_media_usage_work")
    assert row == "MEDIA_USAGE_RESOURCE_LIMIT"
    assert unused(site, "m1") is None


def test_deactivation_drops_the_sources_triggers_and_activation_reconciles_them(site) -> None:
    sql(site, "INSERT INTO options (name, value) VALUES ('logo', :v)",
        v=json.dumps({"mediaId": "m1"}))  # fmt: skip
    drain(site)
    deactivate(site)
    sql(site, "UPDATE options SET value = :v", v=json.dumps({"mediaId": "m2"}))  # not captured
    assert scalar(site, "SELECT count(*) FROM _emdash_media_usage_work") == 0
    assert unused(site, "m2") is None
    activate(site)
    settle(site)
    assert (unused(site, "m1"), unused(site, "m2")) == (True, False)


def test_a_write_while_a_source_is_not_captured_is_refused(site) -> None:
    sql(site, "UPDATE _emdash_media_usage_index_status SET capture_state = NULL "
              "WHERE collection_id = 'source-users'")  # fmt: skip
    with pytest.raises(sa.exc.DBAPIError, match=INACTIVE_MESSAGE):
        sql(site, "INSERT INTO users (id, email, avatar_id) VALUES ('u', 'e', 'm1')")


def test_a_new_media_url_prefix_re_indexes_the_sources(site) -> None:
    sql(site, "INSERT INTO options (name, value) VALUES ('cdn', :v)",
        v=json.dumps({"image": "https://cdn.example.org/f8.png"}))  # fmt: skip
    drain(site)
    assert unused(site, "m8") is True
    add_media_url_prefix(site, "https://cdn.example.org/")
    assert status_row(site, "source-options")["status"] == "stale"
    settle(site)
    assert unused(site, "m8") is False


def test_a_source_is_re_indexed_on_request(site) -> None:
    sql(site, "INSERT INTO options (name, value) VALUES ('logo', :v)",
        v=json.dumps({"mediaId": "m1"}))  # fmt: skip
    drain(site)
    # A hand edit of the index that the request must undo: the source's rows are gone.
    sql(site, "DELETE FROM _emdash_media_usage")
    sql(site, "DELETE FROM _emdash_media_usage_sources")
    assert unused(site, "m1") is True
    run = CliRunner().invoke(main, ["sources", "reindex", "settings", "--database-url",
                                    str(site.url)])  # fmt: skip
    assert run.exit_code == 0, run.output
    assert status_row(site, "source-options")["last_error_code"] == "MEDIA_USAGE_REINDEX_REQUESTED"
    assert unused(site, "m1") is None
    settle(site)
    assert unused(site, "m1") is False
    for bad, code in [("posts", 2), ("table:Nope", 2), ("table:nope", 1)]:
        run = CliRunner().invoke(main, ["sources", "reindex", bad, "--database-url",
                                        str(site.url)])  # fmt: skip
        assert run.exit_code == code, (bad, run.output)


def test_a_usage_listing_pages_through_entries_and_source_rows(site) -> None:
    from media_usage_worker.domain.content_model import FieldDefinition
    from media_usage_worker.repository.registry.collections import create_collection

    create_collection(site, "posts", "Posts", [FieldDefinition("hero", "Hero", "image")])
    activate(site)
    sql(site, "INSERT INTO ec_posts (id, hero) VALUES ('p1', 'm1')")
    for n in range(3):
        sql(site, "INSERT INTO users (id, email, avatar_id) VALUES (:i, :e, 'm1')",
            i=f"u{n}", e=f"{n}@example.org")  # fmt: skip
    sql(site, "INSERT INTO options (name, value) VALUES ('logo', :v)",
        v=json.dumps({"mediaId": "m1"}))  # fmt: skip
    settle(site)
    seen, cursor = [], None
    for _ in range(10):
        page = MediaUsage(site).usage("m1", limit=2, cursor=cursor)
        seen += [(entry.kind, entry.content_id) for entry in page.entries]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == [("content", "p1"), ("settings", "logo"),
                    ("user", "u0"), ("user", "u1"), ("user", "u2")]  # fmt: skip
    assert MediaUsage(site).usage_count("m1") == 5


def test_a_declared_table_the_host_dropped_still_counts_until_removed(site) -> None:
    sql(site, MENU_DDL)
    assert declare(site, "--column", "items=json")[0] == 0
    sql(site, f"INSERT INTO {MENU} (id, items) VALUES ('a', :v)",
        v=json.dumps({"mediaId": "m3"}))  # fmt: skip
    settle(site)
    sql(site, f"DROP TABLE {MENU}")
    # Nothing tells the index the rows are gone: it errs on the side of "used".
    assert unused(site, "m3") is False
    result = CliRunner().invoke(main, ["sources", "remove", MENU, "--database-url",
                                       str(site.url)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert unused(site, "m3") is True
    # Removed, the source no longer needs its table: activation goes through.
    activate(site)


def test_an_untyped_key_column_is_named_as_such(site, dialect) -> None:
    if dialect == "postgresql":
        pytest.skip("every PostgreSQL column has a type")
    sql(site, f"CREATE TABLE {MENU} (id PRIMARY KEY, items TEXT)")
    code, output = declare(site, "--column", "items=json")
    assert code == 2 and "declared with no type, not text" in output, output


def test_sources_list_shows_paths_in_a_column_of_their_own_sorted_by_kind(site) -> None:
    sql(site, MENU_DDL)
    assert declare(site, "--column", "items=json", "--path", "items[].image")[0] == 0
    shown = CliRunner().invoke(main, ["sources", "list", "--database-url", str(site.url)])
    assert shown.exit_code == 0, shown.output
    header, *rows = [line.split() for line in shown.output.splitlines() if line.strip()]
    assert header == ["KIND", "KEY", "COLUMNS", "PATHS", "COVERAGE"]
    assert [row[0] for row in rows] == ["byline", "settings", f"table:{MENU}", "user"]
    # The declared table is empty: complete at once (its coverage is the last column).
    assert rows[2] == [f"table:{MENU}", "id", "items=json", "items[].image", "complete"]


def test_a_queued_settings_write_is_read_for_the_clean_up_not_waited_for(site) -> None:
    sql(site, "INSERT INTO options (name, value) VALUES ('site:favicon', :v)",
        v=json.dumps({"mediaId": "m1", "hero": f"{FILE_URL}f3.png"}))  # fmt: skip
    assert status_row(site, "source-options")["status"] == "stale"  # queued, not indexed
    page = MediaUsage(site).unused()
    assert page.known and {"m1", "m3"}.isdisjoint(i.id for i in page.items)
    result = MediaUsage(site).retire(["m1", "m2", "m3"])
    assert (result.retired, result.refused) == (["m2"], {"m1": "used", "m3": "used"})
