"""Ways around the clean-up's rule, each closed (both dialects).

The rule (docs/design.md §13): an item is retired, and its file purged, only while coverage is
complete, no captured write waits, no current occurrence names it by id or by URL, and no other
library or quarantined row names its storage key. Each test here is one way a used file could
still have gone, tried as a user or an attacker would.
"""

from __future__ import annotations

import json
import threading

import pytest
import sqlalchemy as sa

from media_usage_worker.api import MediaUsage
from media_usage_worker.domain.cleanup import UnusedFilter
from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.pipeline import cleanup
from media_usage_worker.pipeline.purge import PurgeTarget
from media_usage_worker.repository.base.schema import work
from media_usage_worker.repository.quarantine import cleanup as store
from media_usage_worker.repository.quarantine.purge import purge_batch
from media_usage_worker.repository.registry.collections import create_collection
from tests.integration.test_cleanup import cleanup_site, rows, sql
from tests.integration.test_sources import settle
from tests.support import drain

FILE_URL = "/_emdash/api/media/file/"


@pytest.fixture
def library(db: sa.Engine) -> sa.Engine:
    """The clean-up tests' site: posts using m4 (live) and m5 (trashed); m1..m3 unused."""
    return cleanup_site(db)


def in_quarantine(engine: sa.Engine) -> set[str]:
    return {r[0] for r in rows(engine, "SELECT id FROM _media_usage_worker_quarantine")}


def in_library(engine: sa.Engine) -> set[str]:
    return {r[0] for r in rows(engine, "SELECT id FROM media")}


def work_codes(engine: sa.Engine) -> list[tuple[str, str, str]]:
    with engine.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                sa.select(work.c.content_id, work.c.state, work.c.last_error_code)
            )
        ]


# --- a URL use of a retired item ------------------------------------------------------------------


def test_a_url_use_of_a_retired_item_restores_it(library) -> None:
    assert MediaUsage(library).retire(["m1"]).retired == ["m1"]
    sql(library, "INSERT INTO ec_posts (id, hero) VALUES ('p9', :u)", u=FILE_URL + "a.png")
    drain(library)
    assert "m1" in in_library(library) and "m1" not in in_quarantine(library)
    assert MediaUsage(library).is_unused("m1") is False
    (last,) = [a for a in store.audit_page(library, 5) if a["action"] == "restore"]
    assert (last["actor"], last["media_ids"]) == ("worker", ["m1"])


# --- nesting past the bound fails the entry, never "no reference" ---------------------------------


def _nested(depth: int) -> object:
    value: object = {"_type": "custom", "leaf": "x"}
    for _ in range(depth):
        value = {"_type": "custom", "child": value}
    return value


def _deep_text(depth: int) -> str:
    return '{"_type": "custom", "child": ' * depth + '"x"' + "}" * depth


def test_a_portable_text_body_nested_deep_fails_its_entry(library) -> None:
    create_collection(library, "pages", "Pages", [FieldDefinition("body", "Body", "portableText")])
    settle(library)
    image = {"_type": "image", "asset": {"_ref": "m1"}}
    for name, depth in (("past_the_parser", 1200), ("past_the_bound", 300)):
        body = "[" + json.dumps(image) + ", " + _deep_text(depth) + "]"
        sql(library, "INSERT INTO ec_pages (id, body) VALUES (:i, :b)", i=name, b=body)
    drain(library)
    assert sorted(work_codes(library)) == [
        ("past_the_bound", "failed", "MEDIA_USAGE_UNREADABLE_VALUE"),
        ("past_the_parser", "failed", "MEDIA_USAGE_UNREADABLE_VALUE"),
    ]
    index = MediaUsage(library)
    assert index.coverage().status == "partial"
    assert not index.unused().known
    assert index.retire(["m1"]).refused == {"m1": "not_known_yet"}
    # Within the bound the same body is read whole, and its image is a use.
    sql(library, "DELETE FROM ec_pages")
    body = json.dumps([image, _nested(20)])
    sql(library, "INSERT INTO ec_pages (id, body) VALUES ('shallow', :b)", b=body)
    drain(library)
    assert MediaUsage(library).usage_count("m1") == 1


def test_a_setting_nested_deep_fails_its_row(library) -> None:
    value = '{"logo": {"mediaId": "m2"}, "extra": ' + "[" * 1200 + "]" * 1200 + "}"
    sql(library, "INSERT INTO options (name, value) VALUES ('site:deep', :v)", v=value)
    drain(library)
    assert [code for _, _, code in work_codes(library)] == ["MEDIA_USAGE_UNREADABLE_VALUE"]
    assert MediaUsage(library).retire(["m2"]).refused == {"m2": "not_known_yet"}


def test_text_that_starts_like_json_and_is_not_fails_its_entry(library, dialect) -> None:
    if dialect == "postgresql":
        pytest.skip("PostgreSQL's json columns refuse text that is not JSON")
    create_collection(library, "pages", "Pages", [FieldDefinition("body", "Body", "portableText")])
    settle(library)
    sql(library, "INSERT INTO ec_pages (id, body) VALUES ('torn', :b)", b='[{"_type": "image", "as')
    drain(library)
    assert work_codes(library) == [("torn", "failed", "MEDIA_USAGE_UNREADABLE_VALUE")]


# --- a draft edited in place ------------------------------------------------------------------


def _entry_with_draft(engine: sa.Engine, data: str) -> None:
    sql(engine, "INSERT INTO revisions (id, collection, entry_id, data) "
                "VALUES ('r5', 'posts', 'p5', :d)", d=data)  # fmt: skip
    sql(engine, "INSERT INTO ec_posts (id, draft_revision_id) VALUES ('p5', 'r5')")
    drain(engine)


def test_a_draft_edited_in_place_is_captured_like_its_entry(library) -> None:
    _entry_with_draft(library, "{}")
    assert MediaUsage(library).is_unused("m1") is True
    sql(library, """UPDATE revisions SET data = '{"hero": "m1"}' WHERE id = 'r5'""")
    # Captured in the writer's transaction, and read behind the fence before it is indexed.
    assert MediaUsage(library).retire(["m1"]).refused == {"m1": "used"}
    drain(library)
    assert MediaUsage(library).usage_count("m1") == 1


def test_a_draft_edited_in_place_restores_a_retired_item(library) -> None:
    _entry_with_draft(library, "{}")
    assert MediaUsage(library).retire(["m1"]).retired == ["m1"]
    sql(library, """UPDATE revisions SET data = '{"hero": "m1"}' WHERE id = 'r5'""")
    drain(library)
    assert "m1" in in_library(library) and MediaUsage(library).is_unused("m1") is False


def test_a_revision_of_a_collection_nobody_registered_is_left_alone(library) -> None:
    sql(library, "INSERT INTO revisions (id, collection, entry_id, data) "
                 "VALUES ('x1', 'not_registered', 'e1', '{}')")  # fmt: skip
    sql(library, "UPDATE revisions SET data = '{\"a\": 1}' WHERE id = 'x1'")
    assert work_codes(library) == []
    assert MediaUsage(library).coverage().status == "complete"


# --- URLs inside text ---------------------------------------------------------------------------


def test_media_urls_inside_text_are_uses(library) -> None:
    create_collection(library, "pages", "Pages", [
        FieldDefinition("body", "Body", "portableText"),
        FieldDefinition("html", "Html", "text"),
        FieldDefinition("notes", "Notes", "string"),
    ])  # fmt: skip
    settle(library)
    link = {
        "_type": "block",
        "children": [{"_type": "span", "text": "the brochure", "marks": ["l1"]}],
        "markDefs": [
            {"_key": "l1", "_type": "link", "href": f"https://example.org{FILE_URL}b.pdf"}
        ],
    }
    sql(library, "INSERT INTO ec_pages (id, body, html, notes) VALUES ('w', :b, :h, :n)",
        b=json.dumps([link]),
        h=f'<p><img src="{FILE_URL}a.png" alt=""> and [a file]({FILE_URL}c.png)</p>',
        n=f"Download it at {FILE_URL}e.png.")  # fmt: skip
    drain(library)
    counts = MediaUsage(library).usage_counts(["m1", "m2", "m3", "m5"]).counts
    assert counts == {"m1": 1, "m2": 1, "m3": 1, "m5": 1}, counts
    assert MediaUsage(library).retire(["m1", "m2", "m3"]).refused == dict.fromkeys(
        ["m1", "m2", "m3"], "used"
    )
    (entry,) = MediaUsage(library).usage("m2").entries
    uses = [use for source in entry.sources for use in source["occurrences"]]
    assert [(u["field_path"], u["reference_type"]) for u in uses] == [
        ("body[0].markDefs[0].href", "text_url")
    ], entry.sources


# --- purge: checked again, behind the fence ------------------------------------------------------


def _old(engine: sa.Engine) -> None:
    sql(engine, "UPDATE _media_usage_worker_quarantine SET retired_at = '2001-01-01T00:00:00.000Z'")


def _storage(tmp_path, *names: str):
    storage = tmp_path / "files"
    storage.mkdir()
    for name in names:
        (storage / name).write_bytes(name.encode())
    return storage


def test_purge_keeps_an_item_a_write_waiting_to_be_indexed_uses(library, tmp_path) -> None:
    storage = _storage(tmp_path, "a.png")
    assert MediaUsage(library).retire(["m1"]).retired == ["m1"]
    _old(library)
    sql(library, "INSERT INTO ec_posts (id, hero) VALUES ('late', 'm1')")  # not indexed yet
    # Behind the fence the queued write is read (the final sweep alone would also keep it).
    assert purge_batch(library, ["m1"], "t", 30).kept == {"m1": "used"}
    report = cleanup.purge(library, 30, actor="t", target=PurgeTarget(directory=storage))
    assert report.purged == [] and report.kept["m1"].reason in ("used", "mentioned")
    assert (storage / "a.png").exists()
    drain(library)
    assert "m1" in in_library(library)


def test_purge_keeps_a_file_another_item_names(library, tmp_path) -> None:
    storage = _storage(tmp_path, "b.pdf")
    assert MediaUsage(library).retire(["m2"]).retired == ["m2"]
    sql(library, "UPDATE media SET storage_key = 'b.pdf' WHERE id = 'm4'")  # m4 is used
    _old(library)
    # Behind the fence: another item's file (the final sweep alone would also have kept it).
    assert purge_batch(library, ["m2"], "t", 30).kept == {"m2": "shared_file"}
    report = cleanup.purge(library, 30, actor="t", target=PurgeTarget(directory=storage))
    assert report.kept["m2"].reason in ("shared_file", "mentioned")
    assert (storage / "b.pdf").exists()
    # Retiring an item whose file a library item also names is refused the same way.
    sql(library, "UPDATE media SET storage_key = 'b.pdf' WHERE id = 'm3'")
    assert MediaUsage(library).retire(["m3"]).refused == {"m3": "shared_file"}


def test_purge_removes_a_symlink_itself_never_its_target_nor_a_directory(library, tmp_path) -> None:
    storage = _storage(tmp_path, "d.png")  # m4's file: used
    (storage / "a.png").symlink_to(storage / "d.png")
    (storage / "folder").mkdir()
    sql(library, "UPDATE media SET storage_key = 'folder' WHERE id = 'm2'")
    assert MediaUsage(library).retire(["m1", "m2"]).retired == ["m1", "m2"]
    _old(library)
    report = cleanup.purge(library, 30, actor="t", target=PurgeTarget(directory=storage))
    assert report.purged == ["m1", "m2"]
    assert not (storage / "a.png").is_symlink() and (storage / "d.png").read_bytes() == b"d.png"
    assert (storage / "folder").is_dir() and "directory" in report.undelivered["folder"]
    assert report.parked_now == ["folder"]


def test_a_restore_racing_a_purge_wins_whole_or_loses_whole(library) -> None:
    """The quarantine rows are locked first by both: here the restore holds m1 (in flight)
    while a purge batch runs; the purge must not hand m1's file over."""
    from media_usage_worker.repository.base.schema import quarantine
    from media_usage_worker.repository.quarantine import fence

    assert MediaUsage(library).retire(["m1"]).retired == ["m1"]
    _old(library)
    restorer = library.connect()
    restoring = restorer.begin()
    assert list(fence.lock_rows(restorer, quarantine, ["m1"])) == ["m1"]
    outcome: dict[str, object] = {}
    done = threading.Event()

    def purge_now() -> None:
        try:
            outcome["result"] = purge_batch(library, ["m1"], "t", 30)
        except Exception as exc:  # reported below
            outcome["error"] = exc
        done.set()

    thread = threading.Thread(target=purge_now)
    thread.start()
    assert not done.wait(0.2)  # the purge waits for the restore's lock
    store.restore_used(restorer, ["m1"])  # the restore's move, then its commit
    restoring.commit()
    restorer.close()
    assert done.wait(30)
    thread.join()
    assert "error" not in outcome, outcome
    assert outcome["result"].purged == []  # type: ignore[attr-defined]
    assert "m1" in in_library(library)
    assert rows(library, "SELECT count(*) FROM _media_usage_worker_purges") == [(0,)]


def test_a_restore_after_a_purge_says_purged(library, tmp_path) -> None:
    storage = _storage(tmp_path, "a.png")
    assert MediaUsage(library).retire(["m1"]).retired == ["m1"]
    _old(library)
    assert cleanup.purge(library, 30, actor="t", target=PurgeTarget(directory=storage)).purged
    assert MediaUsage(library).restore(["m1"]).refused == {"m1": "purged"}


# --- the final sweep ----------------------------------------------------------------------------


def test_the_final_sweep_keeps_what_any_host_table_mentions(library, tmp_path) -> None:
    storage = _storage(tmp_path, "a.png", "c.png")
    sql(library, "CREATE TABLE host_notes (id TEXT PRIMARY KEY, body TEXT)")
    sql(library, "INSERT INTO host_notes VALUES ('n1', 'the old banner was c.png, keep it')")
    assert MediaUsage(library).retire(["m1", "m3"]).retired == ["m1", "m3"]
    _old(library)
    seen: list[str] = []
    dry = cleanup.purge(library, 30, actor="t", target=PurgeTarget(directory=storage),
                        dry_run=True, progress=lambda table, _: seen.append(table))  # fmt: skip
    assert (dry.purged, dry.kept["m3"].reason) == (["m1"], "mentioned")
    assert "host_notes" in seen and (storage / "a.png").exists()
    report = cleanup.purge(library, 30, actor="t", target=PurgeTarget(directory=storage))
    assert report.purged == ["m1"]
    assert report.kept["m3"].where == "host_notes.body (row n1)"
    kept = [a for a in store.audit_page(library, 10) if a["action"] == "purge_kept"]
    assert [(a["media_ids"], a["detail"]) for a in kept] == [
        (["m3"], "the final sweep found m3 in host_notes.body (row n1)")
    ]  # audited once, by the real run (the dry run writes nothing)
    assert (storage / "c.png").exists() and not (storage / "a.png").exists()
    assert in_quarantine(library) == {"m3"}


# --- undeliverable keys --------------------------------------------------------------------------


def test_undeliverable_keys_are_paged_past_and_parked(library, tmp_path) -> None:
    storage = _storage(tmp_path, "a.png")
    keys = [f"../escape-{i:03}" for i in range(105)]
    with library.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO _media_usage_worker_purges (media_id, storage_key, purged_at) "
            "VALUES (:i, :k, '2001-01-01T00:00:00.000Z')"
        ), [{"i": f"x{i:03}", "k": k} for i, k in enumerate(keys)])  # fmt: skip
    assert MediaUsage(library).retire(["m1"]).retired == ["m1"]
    _old(library)
    first = cleanup.purge(library, 30, actor="t", target=PurgeTarget(directory=storage))
    assert first.purged == ["m1"] and not (storage / "a.png").exists()  # not stopped
    assert len(first.parked_now) == 105
    again = cleanup.purge(library, 30, actor="t", target=PurgeTarget(directory=storage))
    assert (again.undelivered, again.parked_now) == ({}, [])  # parked keys fail no later run
    shown = MediaUsage(library).status().cleanup
    assert shown == {"retired": 0, "undelivered_files": 105, "parked_files": 105}
    assert store.cleanup_counts(library).parked_files == 105  # the metric's figure

    def down(task: str, keys: list[str]) -> None:
        raise ConnectionError("broker down")

    sql(library, "INSERT INTO _media_usage_worker_purges (media_id, storage_key, purged_at) "
                 "VALUES ('y1', 'k.png', '2001-01-01T00:00:00.000Z')")  # fmt: skip
    task = PurgeTarget(task="host.tasks.purge")
    for attempt in range(1, 6):
        tried = cleanup.deliver(library, task, down)
        assert ("k.png" in tried.parked_now) == (attempt == 5), attempt
    assert cleanup.deliver(library, task, down).undelivered == {}


def test_purge_lists_and_forgets_undelivered_files(library) -> None:
    from tests.integration.test_cleanup import cli

    sql(library, "INSERT INTO _media_usage_worker_purges (media_id, storage_key, purged_at, "
                 "parked_at, last_error) VALUES ('y1', 'gone.png', '2001-01-01T00:00:00.000Z', "
                 "'2001-01-02T00:00:00.000Z', 'outside')")  # fmt: skip
    listed = cli(library, "purge", "--undelivered", "--json")
    assert listed.exit_code == 0, listed.output
    (entry,) = json.loads(listed.stdout)
    assert (entry["storage_key"], entry["parked_at"]) == ("gone.png", "2001-01-02T00:00:00.000Z")
    forgot = cli(library, "purge", "--forget", "gone.png")
    assert forgot.exit_code == 0 and "y1" in forgot.stdout
    assert rows(library, "SELECT count(*) FROM _media_usage_worker_purges") == [(0,)]
    assert store.audit_page(library, 1)[0]["action"] == "forget"
    assert cli(library, "purge", "--forget", "gone.png").exit_code == 1
    assert cli(library, "purge").exit_code == 2


# --- the fence never stalls the site, and the row round-trips -------------------------------------


def test_a_host_transaction_on_a_media_row_costs_the_batch_not_every_writer(
    library, dialect
) -> None:
    if dialect == "sqlite":
        pytest.skip("SQLite has one writer: a host transaction holds every other one")
    host = library.connect()
    holding = host.begin()
    host.execute(sa.text("UPDATE media SET alt = 'busy' WHERE id = 'm1'"))
    try:
        result = MediaUsage(library).retire(["m1"])  # gives up after the fence's wait
        assert result.refused == {"m1": "not_known_yet"}
        done = threading.Event()

        def write() -> None:
            sql(library, "INSERT INTO ec_posts (id, hero) VALUES ('w1', 'm2')")
            done.set()

        writer = threading.Thread(target=write)
        writer.start()
        assert done.wait(30)  # a writer goes on while the host transaction is still open
        writer.join()
    finally:
        holding.rollback()
        host.close()


def test_a_host_edit_in_flight_is_kept_by_the_retirement(library, dialect) -> None:
    if dialect == "sqlite":
        pytest.skip("SQLite has one writer: the retirement waits for the edit's commit")
    host = library.connect()
    editing = host.begin()
    host.execute(sa.text("UPDATE media SET alt = 'edited' WHERE id = 'm1'"))
    outcome: dict[str, object] = {}
    done = threading.Event()

    def retire() -> None:
        outcome["result"] = MediaUsage(library).retire(["m1"])
        done.set()

    thread = threading.Thread(target=retire)
    thread.start()
    _wait_for_a_lock_wait(library)
    editing.commit()
    host.close()
    assert done.wait(30)
    thread.join()
    assert outcome["result"].retired == ["m1"]  # type: ignore[attr-defined]
    assert MediaUsage(library).restore(["m1"]).restored == ["m1"]
    assert rows(library, "SELECT alt FROM media WHERE id = 'm1'") == [("edited",)]


def _wait_for_a_lock_wait(engine: sa.Engine, deadline: float = 30.0) -> None:
    """Poll (with a deadline) until some backend waits for a lock."""
    import time

    end = time.monotonic() + deadline
    with engine.connect() as conn:
        while time.monotonic() < end:
            waiting = conn.execute(sa.text("SELECT count(*) FROM pg_locks WHERE NOT granted"))
            if waiting.scalar_one():
                return
            conn.rollback()
    raise AssertionError("no backend waited for a lock")


def test_a_column_the_host_added_to_media_round_trips(library) -> None:
    sql(library, "ALTER TABLE media ADD COLUMN credit TEXT")
    sql(library, "ALTER TABLE media ADD COLUMN width_cm INTEGER")
    sql(library, "UPDATE media SET credit = 'Ada', width_cm = 12 WHERE id = 'm1'")
    before = rows(library, "SELECT * FROM media WHERE id = 'm1'")
    assert MediaUsage(library).retire(["m1"]).retired == ["m1"]
    assert MediaUsage(library).restore(["m1"]).restored == ["m1"]
    assert rows(library, "SELECT * FROM media WHERE id = 'm1'") == before


def test_concurrent_retirements_of_the_same_ids_answer_already_retired(library, dialect) -> None:
    results: list[object] = []
    errors: list[BaseException] = []

    def second() -> None:
        try:
            results.append(MediaUsage(library).retire(["m1", "m2"]))
        except BaseException as exc:  # reported below
            errors.append(exc)

    other = threading.Thread(target=second)

    def while_the_first_holds_its_batch() -> None:
        other.start()
        if dialect == "postgresql":
            _wait_for_a_lock_wait(library)

    first = cleanup.retire_all_unused(
        library, UnusedFilter(), actor="t", before_move=while_the_first_holds_its_batch
    )
    other.join(30)
    assert errors == [] and first.retired == ["m1", "m2", "m3"]
    (result,) = results
    assert result.refused == {"m1": "already_retired", "m2": "already_retired"}  # type: ignore[attr-defined]


def test_dry_runs_apply_the_real_rules(library) -> None:
    from media_usage_worker.pipeline.registry import request_reindex
    from tests.integration.test_cleanup import cli

    request_reindex(library, "posts")  # not known until the collection is reconciled
    dry = cli(library, "retire", "--all-unused", "--dry-run", "--json")
    assert json.loads(dry.stdout) == {
        "would_retire": [], "refused": dict.fromkeys(["m1", "m2", "m3"], "not_known_yet"),
    }  # fmt: skip
    assert dry.exit_code == 1
    assert cleanup.retire_all_unused(library, UnusedFilter(), actor="t", dry_run=True).retired == []
