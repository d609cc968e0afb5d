"""Sources beyond content through a real beat and real worker processes: a favicon, avatars
and a declared menu table become uses within the fast path, a declared table's existing rows
are backfilled before coverage is complete again, and removing it leaves nothing."""

from __future__ import annotations

import json

import sqlalchemy as sa

from media_usage_worker.api import MediaUsage
from media_usage_worker.pipeline.capture import activate
from media_usage_worker.repository.base.schema import media
from tests.index_oracle import actual_index, expected_index
from tests.processes import cli, wait_for
from tests.support import status_row

FILE_URL = "/_emdash/api/media/file/"
SETTLE_SECONDS = 60


def sql(engine: sa.Engine, statement: str, **params: object) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(statement), params)


def answer(engine: sa.Engine, media_id: str) -> bool | None:
    return MediaUsage(engine).is_unused(media_id)


def becomes(engine: sa.Engine, media_id: str, unused: bool) -> None:
    wait_for(lambda: answer(engine, media_id) is unused, timeout=SETTLE_SECONDS)


def test_settings_avatars_and_a_declared_table_through_worker_and_beat(
    db, processes, migrated_url
) -> None:
    rows = [
        {"id": f"m{n}", "filename": f"f{n}.png", "mime_type": "image/png",
         "storage_key": f"f{n}.png"}
        for n in range(1, 7)
    ]  # fmt: skip
    with db.begin() as conn:
        conn.execute(media.insert(), rows)
    sql(db, "CREATE TABLE menu_items (id TEXT PRIMARY KEY, items TEXT, link TEXT)")
    sql(db, "INSERT INTO menu_items (id, items, link) VALUES ('main', :items, :link)",
        items=json.dumps([{"image": {"mediaId": "m4"}}]), link=FILE_URL + "f5.png")  # fmt: skip
    activate(db)
    processes.env["MEDIA_USAGE_RECONCILE_SECONDS"] = "1"
    processes.env["MEDIA_USAGE_RECONCILE_DEFER_SECONDS"] = "1"
    processes.worker(concurrency=2)
    processes.beat()
    becomes(db, "m1", True)  # every built-in source reconciled: "unused" is known

    sql(db, "INSERT INTO options (name, value) VALUES ('site:favicon', :v)",
        v=json.dumps({"mediaId": "m1"}))  # fmt: skip
    becomes(db, "m1", False)
    sql(db, "DELETE FROM options WHERE name = 'site:favicon'")
    becomes(db, "m1", True)

    sql(db, "INSERT INTO users (id, email, avatar_id) VALUES ('u1', 'a@example.org', 'm2')")
    sql(db, "INSERT INTO _emdash_bylines (id, slug, display_name, avatar_media_id) "
            "VALUES ('b1', 'ada', 'Ada', 'm3')")  # fmt: skip
    becomes(db, "m2", False)
    becomes(db, "m3", False)

    # A declared table with rows already in it: "unused" is not known until they are indexed.
    added = cli("sources", "add", "menu_items", "--column", "items=json",
                "--column", "link=url", url=migrated_url)  # fmt: skip
    assert added.code == 0, added.err
    assert answer(db, "m4") is not True
    becomes(db, "m4", False)
    assert answer(db, "m5") is False
    assert status_row(db, "source-menu_items")["status"] == "complete"
    sql(db, "UPDATE menu_items SET items = :v", v=json.dumps([{"image": {"mediaId": "m6"}}]))
    becomes(db, "m6", False)
    becomes(db, "m4", True)
    assert actual_index(db) == expected_index(db)

    removed = cli("sources", "remove", "menu_items", url=migrated_url)
    assert removed.code == 0, removed.err
    assert answer(db, "m6") is True
    listed = cli("sources", "list", "--json", url=migrated_url)
    assert [s["kind"] for s in json.loads(listed.out)] == ["byline", "settings", "user"]
