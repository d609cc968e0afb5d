"""From "unused" to a safe clean-up: the unused listing, retirement behind the write fence,
restore, the restore a later use makes, and dangling references (both dialects)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from media_usage_worker.api import MediaUsage
from media_usage_worker.domain.cleanup import UnusedFilter
from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.errors import InvalidArgument
from media_usage_worker.domain.remembered import RememberedTotals
from media_usage_worker.pipeline import cleanup
from media_usage_worker.pipeline.registry import request_reindex
from media_usage_worker.repository.base.schema import media
from media_usage_worker.repository.quarantine import cleanup as store
from media_usage_worker.repository.registry.collections import create_collection
from tests.integration.test_sources import settle
from tests.support import db_time, drain, mark_coverage_complete

API_DOC = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
LIBRARY = {
    "m1": ("a.png", "image/png", 100, "2020-01-01 00:00:00"),
    "m2": ("b.pdf", "application/pdf", 200, "2020-01-01 00:00:00"),
    "m3": ("c.png", "image/png", 300, "2099-01-01 00:00:00"),
    "m4": ("d.png", "image/png", 400, "2020-01-01 00:00:00"),
    "m5": ("e.png", "image/png", 500, "2020-01-01 00:00:00"),
}


def sql(engine: sa.Engine, statement: str, **params: object) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(statement), params)


def rows(engine: sa.Engine, statement: str, **params: object) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(statement), params)]


@pytest.fixture
def site(db: sa.Engine) -> Iterator[sa.Engine]:
    """Posts using m4 (live) and m5 (only from a trashed entry); m1..m3 used nowhere."""
    yield cleanup_site(db)


def cleanup_site(db: sa.Engine) -> sa.Engine:
    """The ``site`` fixture's database, for other test modules' fixtures."""
    with db.begin() as conn:
        conn.execute(media.insert(), [
            {"id": i, "filename": f, "mime_type": t, "size": n, "storage_key": f,
             "created_at": at, "alt": f"alt {i}"}
            for i, (f, t, n, at) in LIBRARY.items()
        ])  # fmt: skip
    create_collection(db, "posts", "Posts", [FieldDefinition("hero", "Hero", "image")])
    from media_usage_worker.pipeline.capture import activate

    activate(db)
    sql(db, "INSERT INTO ec_posts (id, hero) VALUES ('p1', 'm4')")
    sql(db, "INSERT INTO ec_posts (id, hero, deleted_at) VALUES ('p2', 'm5', '2026-01-01')")
    settle(db)
    return db


def listed(engine: sa.Engine, **chosen: object) -> list[str]:
    page = cleanup.unused(engine, UnusedFilter(**chosen), limit=100)  # type: ignore[arg-type]
    assert page.known
    return [item.id for item in page.items]


def test_a_queued_write_is_read_for_the_listing_instead_of_waited_for(site) -> None:
    sql(site, "INSERT INTO ec_posts (id, hero) VALUES ('p3', 'm1')")  # captured, not indexed
    page = MediaUsage(site).unused()
    assert (page.known, page.coverage) == (True, "stale")
    assert [i.id for i in page.items] == ["m2", "m3"] and page.total_count == 2
    drain(site)
    assert [i.id for i in MediaUsage(site).unused().items] == ["m2", "m3"]


def test_nothing_is_listed_while_a_collection_needs_reconciling(site) -> None:
    request_reindex(site, "posts")
    page = MediaUsage(site).unused()
    assert (page.known, page.coverage, page.items, page.total_count) == (
        False, "stale", [], None,
    )  # fmt: skip
    assert MediaUsage(site).retire(["m1"]).refused == {"m1": "not_known_yet"}


def test_a_queued_write_that_cannot_be_read_makes_the_answer_not_known(site) -> None:
    from tests.support import get_work

    sql(site, "INSERT INTO ec_posts (id, hero) VALUES ('p3', 'm1')")
    assert MediaUsage(site).unused().known
    assert get_work(site, posts_id(site), "p3") is not None
    sql(
        site, "UPDATE _emdash_media_usage_work SET state = 'failed', last_error_code = 'X' "
        "WHERE content_id = 'p3'",
    )  # fmt: skip
    assert not MediaUsage(site).unused().known
    assert MediaUsage(site).retire(["m2"]).refused == {"m2": "not_known_yet"}


def posts_id(engine: sa.Engine) -> str:
    return rows(engine, "SELECT id FROM _emdash_collections WHERE slug = 'posts'")[0][0]


def test_the_unused_listing_pages_filters_and_totals(site) -> None:
    index = MediaUsage(site)
    first = index.unused(limit=2)
    assert [i.id for i in first.items] == ["m1", "m2"]
    assert (first.total_count, first.total_bytes) == (3, 600)
    assert first.items[0].filename == "a.png" and first.items[0].size == 100
    second = index.unused(limit=2, cursor=first.next_cursor)
    assert [i.id for i in second.items] == ["m3"] and second.next_cursor is None
    assert listed(site, older_than_days=30) == ["m1", "m2"]
    assert listed(site, mime_prefix="image/") == ["m1", "m3"]
    assert listed(site, trashed_only=True) == ["m5"]
    # A cursor is only good for the listing that issued it.
    with pytest.raises(InvalidArgument):
        index.unused(limit=2, cursor=first.next_cursor, mime_prefix="image/")
    for bad in ({"older_than": -1}, {"mime_prefix": ""}, {"limit": 0}):
        with pytest.raises(InvalidArgument):
            index.unused(**bad)  # type: ignore[arg-type]


def test_the_totals_are_counted_once_per_state_and_follow_every_change(site) -> None:
    """Remembered totals are those of the database as it is: an upload, a use, a retirement
    and a restore each count again; a change in place the state cannot see, after the age
    limit."""
    clock = [0.0]
    remembered = RememberedTotals(clock=lambda: clock[0])

    def totals(**chosen: object) -> tuple[int, int] | None:
        chosen_filter = UnusedFilter(**chosen)  # type: ignore[arg-type]
        read = store.unused_items(site, chosen_filter, None, 1, totals=True, remembered=remembered)
        assert read.known
        return read.totals

    day = db_time(site)[:10]
    assert totals() == totals() == (3, 600)
    if db_time(site)[:10] == day:  # a new day between the two is a new state
        assert (remembered.misses, remembered.hits) == (1, 1)
    sql(
        site, "INSERT INTO media (id, filename, mime_type, size, storage_key, created_at) "
        "VALUES ('m6', 'f.png', 'image/png', 600, 'f.png', '2020-01-01 00:00:00')",
    )  # fmt: skip
    assert totals() == (4, 1200)
    sql(site, "INSERT INTO ec_posts (id, hero) VALUES ('p3', 'm6')")
    assert totals() == (3, 600)  # queued, read behind the listing: never remembered
    drain(site)
    assert totals() == (3, 600)
    assert MediaUsage(site).retire(["m1"], actor="ops").retired == ["m1"]
    assert totals() == (2, 500)
    assert MediaUsage(site).restore(["m1"], actor="ops").restored == ["m1"]
    assert totals() == (3, 600)
    assert totals(mime_prefix="image/") == (2, 400)
    sql(site, "UPDATE media SET mime_type = 'application/pdf' WHERE id = 'm3'")
    day = db_time(site)[:10]
    unseen = totals(mime_prefix="image/")
    if db_time(site)[:10] == day:  # a new day is a new state: counted again at once
        assert unseen == (2, 400)  # unseen until the age limit
    clock[0] += 61
    assert totals(mime_prefix="image/") == (1, 100)
    # Another database's engine never sees these.
    assert cleanup.remembered_totals(site) is cleanup.remembered_totals(site)


def test_retire_moves_an_unused_item_whole_and_says_why_for_the_rest(site) -> None:
    before = rows(site, "SELECT * FROM media WHERE id = 'm1'")
    result = MediaUsage(site).retire(["m1", "m4", "m5", "nope", "m1"], actor="ops")
    assert result.retired == ["m1"]
    assert result.refused == {"m4": "used", "m5": "used", "nope": "not_in_library"}
    assert rows(site, "SELECT id FROM media WHERE id = 'm1'") == []
    kept = rows(site, "SELECT retired_by, reason FROM _media_usage_worker_quarantine")
    assert kept == [("ops", "unused")]
    assert MediaUsage(site).retire(["m1"]).refused == {"m1": "already_retired"}
    (entry,) = [a for a in store.audit_page(site, 10) if a["action"] == "retire"]
    assert (entry["actor"], entry["media_ids"]) == ("ops", ["m1"])

    restored = MediaUsage(site).restore(["m1", "m2", "m9"], actor="ops")
    assert restored.restored == ["m1"]
    assert restored.refused == {"m2": "in_library", "m9": "not_retired"}
    assert rows(site, "SELECT * FROM media WHERE id = 'm1'") == before


def test_a_write_waiting_to_be_indexed_is_read_behind_the_fence(site) -> None:
    sql(site, "INSERT INTO ec_posts (id, hero) VALUES ('p9', 'm2')")  # captured, not indexed
    result = MediaUsage(site).retire(["m1", "m2"])
    assert (result.retired, result.refused) == (["m1"], {"m2": "used"})
    assert rows(site, "SELECT count(*) FROM media") == [(4,)]


def test_a_later_use_of_a_retired_item_restores_it(site) -> None:
    assert MediaUsage(site).retire(["m2"]).retired == ["m2"]
    sql(site, "INSERT INTO ec_posts (id, hero) VALUES ('p9', 'm2')")
    drain(site)
    assert rows(site, "SELECT id FROM media WHERE id = 'm2'") == [("m2",)]
    assert rows(site, "SELECT count(*) FROM _media_usage_worker_quarantine") == [(0,)]
    assert store.audit_page(site, 1)[0]["action"] == "restore"
    assert MediaUsage(site).is_unused("m2") is False


def test_a_write_in_flight_holds_the_retirement_until_it_commits(site) -> None:
    """The fence, with real connections: a write that references m1 has run its capture
    trigger but not committed; the retirement waits for it, then reads the write it queued and
    keeps m1."""
    writer = site.connect()
    writing = writer.begin()
    writer.execute(sa.text("INSERT INTO ec_posts (id, hero) VALUES ('p9', 'm1')"))
    done = threading.Event()
    outcome: dict[str, object] = {}

    def retire() -> None:
        try:
            outcome["result"] = MediaUsage(site).retire(["m1"])
        except Exception as exc:  # reported below
            outcome["error"] = exc
        done.set()

    thread = threading.Thread(target=retire)
    thread.start()
    # It waits: not done while the write is open (a poll with a deadline, not a sleep), for
    # less than the fence's own limit.
    assert not done.wait(store.FENCE_WAIT_MS / 2000)
    writing.commit()
    writer.close()
    assert done.wait(30)
    thread.join()
    assert "error" not in outcome, outcome
    assert outcome["result"].refused == {"m1": "used"}  # type: ignore[union-attr]
    assert rows(site, "SELECT id FROM media WHERE id = 'm1'") == [("m1",)]


def test_dangling_references_are_listed_with_where(site) -> None:
    sql(site, "INSERT INTO ec_posts (id, hero) VALUES ('p7', 'ghost')")
    drain(site)
    found, total = store.dangling(site, 10)
    assert (found, total) == ([("ghost", "posts", "p7", "hero")], 1)
    # A retired item is not dangling: it is in the quarantine.
    mark_coverage_complete(site)
    assert MediaUsage(site).retire(["m1"]).retired == ["m1"]
    assert store.dangling(site, 10)[1] == 1


def test_many_missing_ids_are_found_by_a_join_instead_of_a_list(site, monkeypatch) -> None:
    """Past the missing ids bound as a list, the references are found by a join: the same
    answer either way."""
    sql(site, "INSERT INTO ec_posts (id, hero) VALUES ('p7', 'ghost'), ('p8', 'phantom')")
    drain(site)
    as_list = store.dangling(site, 10)
    monkeypatch.setattr(store, "_MISSING_AS_LIST", 1)
    assert store.dangling(site, 10) == as_list
    assert [r.media_id for r in as_list.references] == ["ghost", "phantom"]
    assert as_list.total == 2 == store.cleanup_counts(site).dangling


def test_retire_all_unused_takes_the_selection_a_batch_at_a_time(site) -> None:
    dry = cleanup.retire_all_unused(site, UnusedFilter(), actor="ops", dry_run=True)
    assert dry.retired == ["m1", "m2", "m3"]
    assert rows(site, "SELECT count(*) FROM media") == [(5,)]
    done = cleanup.retire_all_unused(site, UnusedFilter(mime_prefix="image/"), actor="ops")
    assert done.retired == ["m1", "m3"]
    assert sorted(r[0] for r in rows(site, "SELECT id FROM media")) == ["m2", "m4", "m5"]
    ids = json.loads(rows(site, "SELECT media_ids FROM _media_usage_worker_audit")[0][0])
    assert ids == ["m1", "m3"]


def cli(engine: sa.Engine, *args: str):
    from click.testing import CliRunner

    from media_usage_worker.cli import main

    return CliRunner().invoke(main, [*args, "--database-url", str(engine.url)])


def test_the_command_line_lists_retires_restores_and_audits(site) -> None:
    listed_json = json.loads(cli(site, "unused", "--json").output)
    assert [i["id"] for i in listed_json["items"]] == ["m1", "m2", "m3"]
    assert (listed_json["total_count"], listed_json["total_bytes"]) == (3, 600)
    assert cli(site, "unused", "--csv").output.splitlines()[1].startswith("m1,a.png,image/png")
    assert cli(site, "unused", "--include-trashed-only", "--json").exit_code == 0

    dry = cli(site, "retire", "--all-unused", "--mime", "image/", "--dry-run", "--json")
    assert json.loads(dry.output) == {"would_retire": ["m1", "m3"], "refused": {}}
    dry_ids = cli(site, "retire", "m1", "m4", "--dry-run", "--json")
    assert json.loads(dry_ids.stdout) == {"would_retire": ["m1"], "refused": {"m4": "used"}}
    assert dry_ids.exit_code == 1  # an id was refused: not everything asked for would happen
    done = cli(site, "retire", "m1", "m4", "--json")
    assert json.loads(done.stdout) == {"retired": ["m1"], "refused": {"m4": "used"}}
    assert done.exit_code == 1 and "1 id(s) refused" in done.stderr
    back = cli(site, "restore", "m1", "--json")
    assert json.loads(back.output) == {"restored": ["m1"], "refused": {}}
    audit = json.loads(cli(site, "audit", "--json").output)
    assert [a["action"] for a in audit] == ["restore", "retire"]
    assert audit[0]["actor"].startswith("cli")
    assert json.loads(cli(site, "dangling", "--json").output) == {"total": 0, "references": []}

    for bad in (["retire"], ["retire", "m1", "--all-unused"], ["retire", "m1", "--mime", "a/"],
                ["unused", "--older-than", "-1"], ["unused", "--json", "--csv"],
                ["unused", "--mime", ""], ["restore"]):  # fmt: skip
        result = cli(site, *bad)
        assert result.exit_code == 2, (bad, result.output)
    sql(site, "INSERT INTO ec_posts (id, hero) VALUES ('p9', 'm2')")
    assert "m2" not in cli(site, "unused").output  # a queued write is read, not waited for
    request_reindex(site, "posts")
    waiting = cli(site, "unused")
    assert waiting.exit_code == 1 and "not known yet: coverage is stale" in waiting.output
    as_json = cli(site, "unused", "--json")  # with --json the answer is JSON, on stdout
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout) == {"known": False, "coverage": "stale", "items": []}
    assert cli(site, "dangling", "--limit", "101").exit_code == 2  # as GET /v1/dangling


def test_over_http_with_a_real_server(site, tmp_path) -> None:
    from tests.http_server import serving

    storage = tmp_path / "files"
    storage.mkdir()
    (storage / "c.png").write_bytes(b"c")
    url = str(site.url.render_as_string(hide_password=False))
    with serving(url, tmp_path, MEDIA_USAGE_STORAGE_DIR=str(storage)) as api:
        page = api.get("/v1/unused?limit=2&mime=image/")
        assert page.status == 200, page.text
        assert [i["id"] for i in page.json["items"]] == ["m1", "m3"]
        assert page.json["total_count"] == 2
        assert api.get("/v1/unused", token=None).status in (401, 403)
        assert api.get("/v1/unused?older_than=-3").status == 400

        dry = api.post("/v1/media/retire", {"all_unused": True, "dry_run": True})
        assert dry.json == {"would_retire": ["m1", "m2", "m3"], "refused": {}}
        done = api.post("/v1/media/retire", {"ids": ["m1", "m4"]})
        assert done.status == 200 and done.json == {"retired": ["m1"], "refused": {"m4": "used"}}
        assert api.post("/v1/media/retire", {"ids": ["m1"], "all_unused": True}).status == 400
        assert api.post("/v1/media/retire", {"ids": "m1"}).status == 400
        assert api.post("/v1/media/retire", {"ids": ["m2"]}, token="wrong").status in (401, 403)
        back = api.post("/v1/media/restore", {"ids": ["m1"]})
        assert back.json == {"restored": ["m1"], "refused": {}}
        assert api.get("/v1/dangling").json == {"total": 0, "references": []}

        assert api.post("/v1/media/retire", {"ids": ["m3"]}).json["retired"] == ["m3"]
        sql(site, "INSERT INTO ec_posts (id, hero) VALUES ('p8', 'ghost')")
        drain(site)
        metrics = api.get("/metrics").text
        # Every family the server exports is in docs/api.md's table, and no more.
        exported = set(re.findall(r"^# TYPE (media_usage_\w+) ", metrics, re.M))
        documented = set(re.findall(r"^\| `(media_usage_\w+)` \|", API_DOC, re.M))
        assert exported == documented, exported ^ documented
        for line in ("media_usage_retired_items 1.0", "media_usage_dangling_references 1.0",
                     "media_usage_restored_by_use 0.0", "media_usage_purged_files_undelivered 0.0",
                     'media_usage_coverage_complete{collection="settings"} 1.0'):  # fmt: skip
            assert line in metrics, line
        sql(site, "UPDATE _media_usage_worker_quarantine SET retired_at = '2001-01-01'")
        dry = api.post("/v1/media/purge", {"retired_before": 30, "dry_run": True}).json
        assert (dry["would_purge"], dry["dry_run"]) == (["m3"], True)
        purged = api.post("/v1/media/purge", {"retired_before": 30})
        assert purged.json == {
            "purged": ["m3"], "delivered": 1, "undelivered": {}, "kept": {}, "parked_now": [],
            "dry_run": False,
        }  # fmt: skip
        assert not (storage / "c.png").exists()
        assert api.post("/v1/media/purge", {"retired_before": "30"}).status == 400
        assert api.post("/v1/media/purge", {"retired_before": 30}, token="x" * 20).status in (
            401, 403,
        )  # fmt: skip
        request_reindex(site, "posts")
        waiting = api.get("/v1/unused")
        assert waiting.status == 409 and waiting.json["error"]["code"] == "not_known_yet"
    audit = store.audit_page(site, 10)
    assert [(a["actor"], a["action"]) for a in audit] == [
        ("http", "purge"), ("http", "retire"), ("http", "restore"), ("http", "retire"),
    ]  # fmt: skip
    with serving(url, tmp_path) as api:  # no target: nothing is purged
        nowhere = api.post("/v1/media/purge", {"retired_before": 0})
        assert (nowhere.status, nowhere.json["error"]["code"]) == (409, "nowhere_to_purge")
        assert "MEDIA_USAGE_STORAGE_DIR" in nowhere.json["error"]["message"]


def _retired_long_ago(engine: sa.Engine, *ids: str) -> None:
    assert MediaUsage(engine).retire(list(ids)).retired == list(ids)
    sql(engine, "UPDATE _media_usage_worker_quarantine SET retired_at = '2001-01-01T00:00:00.000Z'")


def test_purge_deletes_files_under_the_storage_directory_and_nothing_outside(
    site, tmp_path, monkeypatch
) -> None:
    storage = tmp_path / "files"
    storage.mkdir()
    (storage / "a.png").write_bytes(b"a")
    outside = tmp_path / "outside.png"
    outside.write_bytes(b"keep me")
    sql(site, "UPDATE media SET storage_key = '../outside.png' WHERE id = 'm2'")
    _retired_long_ago(site, "m1", "m2")
    monkeypatch.setenv("MEDIA_USAGE_STORAGE_DIR", str(storage))
    monkeypatch.delenv("MEDIA_USAGE_PURGE_TASK", raising=False)

    dry = cli(site, "purge", "--retired-before", "30", "--dry-run", "--json")
    assert json.loads(dry.stdout)["would_purge"] == ["m1", "m2"]
    assert (storage / "a.png").exists()
    done = cli(site, "purge", "--retired-before", "30", "--json")
    assert done.exit_code == 1  # one file could not be delivered
    report = json.loads(done.output.splitlines()[0])
    assert (report["purged"], report["delivered"]) == (["m1", "m2"], 1)
    assert "outside MEDIA_USAGE_STORAGE_DIR" in report["undelivered"]["../outside.png"]
    assert not (storage / "a.png").exists() and outside.read_bytes() == b"keep me"
    assert rows(site, "SELECT count(*) FROM _media_usage_worker_quarantine") == [(0,)]
    # The refused key stays queued, with why, for an operator to look at.
    assert rows(site, "SELECT storage_key, attempt_count FROM _media_usage_worker_purges") == [
        ("../outside.png", 1)
    ]
    assert store.audit_page(site, 1)[0]["action"] == "purge"


def test_purge_hands_the_keys_to_the_hosts_task_and_keeps_them_until_sent(
    site, monkeypatch, redis_url
) -> None:
    import redis

    from tests.processes import cli as run

    _retired_long_ago(site, "m1", "m3")
    url = site.url.render_as_string(hide_password=False)
    monkeypatch.delenv("MEDIA_USAGE_STORAGE_DIR", raising=False)
    monkeypatch.setenv("MEDIA_USAGE_PURGE_TASK", "host.tasks.purge_files")
    monkeypatch.setenv("MEDIA_USAGE_PURGE_QUEUE", "host-purges")
    monkeypatch.setenv("MEDIA_USAGE_BROKER_URL", "redis://127.0.0.1:1/0")  # nobody there
    down = run("purge", "--retired-before", "1", "--json", url=url)
    assert down.code == 1, down.err
    assert rows(site, "SELECT count(*) FROM _media_usage_worker_purges") == [(2,)]

    client = redis.Redis.from_url(redis_url)
    client.delete("host-purges")
    monkeypatch.setenv("MEDIA_USAGE_BROKER_URL", redis_url)
    up = run("purge", "--retired-before", "1", "--json", url=url)
    assert up.code == 0, up.err
    assert json.loads(up.out)["delivered"] == 2
    assert rows(site, "SELECT count(*) FROM _media_usage_worker_purges") == [(0,)]
    (message,) = client.lrange("host-purges", 0, -1)
    body = json.loads(message)
    assert body["headers"]["task"] == "host.tasks.purge_files"
    import base64

    args = json.loads(base64.b64decode(body["body"]))[0]
    assert args == [["a.png", "c.png"]]
    client.close()


def test_purge_without_a_target_changes_nothing(site, monkeypatch, tmp_path) -> None:
    _retired_long_ago(site, "m1")
    monkeypatch.delenv("MEDIA_USAGE_STORAGE_DIR", raising=False)
    monkeypatch.delenv("MEDIA_USAGE_PURGE_TASK", raising=False)
    result = cli(site, "purge", "--retired-before", "1")
    assert result.exit_code == 2 and "MEDIA_USAGE_PURGE_TASK" in result.output
    monkeypatch.setenv("MEDIA_USAGE_STORAGE_DIR", "relative/dir")
    assert cli(site, "purge", "--retired-before", "1").exit_code == 2
    monkeypatch.setenv("MEDIA_USAGE_STORAGE_DIR", str(tmp_path))
    monkeypatch.setenv("MEDIA_USAGE_PURGE_TASK", "host.tasks.purge_files")
    both = cli(site, "purge", "--retired-before", "1")
    assert both.exit_code == 2 and "not both" in both.output
    assert rows(site, "SELECT count(*) FROM _media_usage_worker_quarantine") == [(1,)]


def test_a_later_page_is_not_known_once_coverage_is_not_complete(site) -> None:
    first = MediaUsage(site).unused(limit=1)
    assert first.next_cursor is not None and first.total_count == 3
    second = MediaUsage(site).unused(limit=1, cursor=first.next_cursor)
    assert (second.known, second.total_count, [i.id for i in second.items]) == (True, 3, ["m2"])
    sql(site, "INSERT INTO ec_posts (id, hero) VALUES ('p9', 'm2')")
    queued = MediaUsage(site).unused(limit=1, cursor=first.next_cursor)
    assert (queued.known, [i.id for i in queued.items]) == (True, ["m3"])
    request_reindex(site, "posts")
    later = MediaUsage(site).unused(limit=1, cursor=first.next_cursor)
    assert (later.known, later.items, later.coverage) == (False, [], "stale")


def test_a_long_host_transaction_costs_one_batch_not_every_writer(site, dialect) -> None:
    """PostgreSQL queues later writers behind a waiting lock request: the fence gives up after
    ``FENCE_WAIT_MS`` (the batch not known yet) instead of stalling every write."""
    if dialect == "sqlite":
        pytest.skip("SQLite has one writer: a long host transaction holds every other one")
    writer = site.connect()
    writing = writer.begin()
    writer.execute(sa.text("INSERT INTO ec_posts (id, hero) VALUES ('p9', 'm1')"))
    try:
        started = time.monotonic()
        result = MediaUsage(site).retire(["m1", "m2"])
        waited = time.monotonic() - started
        assert result.refused == {"m1": "not_known_yet", "m2": "not_known_yet"}
        assert waited < store.FENCE_WAIT_MS / 1000 + 5
        # The fence let go: a captured write elsewhere (the settings' coverage row) is not
        # queued behind it.
        other = site.connect()
        with other.begin():
            other.execute(sa.text("INSERT INTO options (name, value) VALUES ('x', '1')"))
        other.close()
    finally:
        writing.rollback()
        writer.close()
    assert rows(site, "SELECT count(*) FROM media") == [(5,)]
