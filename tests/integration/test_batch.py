"""The batch path against real databases: one batch, many outcomes, each item only itself."""

from __future__ import annotations

import signal
import threading
import time

import pytest
import sqlalchemy as sa

from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.errors import InvalidArgument
from media_usage_worker.domain.policy import Limits
from media_usage_worker.domain.snapshots import ContentEntry
from media_usage_worker.domain.work import MAX_BATCH, Item, checked_items
from media_usage_worker.pipeline.batch import BatchRun
from media_usage_worker.pipeline.refresh import (
    columns_to_read,
    media_urls,
    plan_refresh,
    refresh_entries,
    refresh_entry,
)
from media_usage_worker.repository.base.db import create_engine, transaction
from media_usage_worker.repository.index import projection
from media_usage_worker.repository.index.source_writes import (
    EntryWrite,
    apply_writes,
    write_entries,
)
from media_usage_worker.repository.work_queue.work import MediaUsageWorkRepository
from tests.index_oracle import actual_index, actual_source_keys, expected_index
from tests.support import PAST, active_collection, get_work, set_work, status_row

FIELDS = [FieldDefinition("title", "Title", "string"), FieldDefinition("hero", "Hero", "image")]


def sql(engine: sa.Engine, statement: str, **params: object) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(statement), params)


def write(engine: sa.Engine, count: int, prefix: str = "e") -> list[str]:
    ids = [f"{prefix}{i:03d}" for i in range(count)]
    with engine.begin() as conn:
        for content_id in ids:
            conn.execute(
                sa.text("INSERT INTO ec_posts (id, hero) VALUES (:i, :h)"),
                {"i": content_id, "h": f"m-{content_id}"},
            )
    return ids


def items(collection_id: str, ids: list[str], version: int = 1) -> list[Item]:
    return [Item(collection_id, content_id, version) for content_id in ids]


def outcomes(results: list) -> dict[str, str]:
    return {r.content_id: str(r.outcome) for r in results}


@pytest.fixture
def media_posts(db: sa.Engine):
    """The posts collection with a title and an image field, capture active."""
    return active_collection(db, "posts", FIELDS)


def test_a_batch_indexes_every_item_and_restores_coverage(db, media_posts) -> None:
    ids = write(db, 60)
    results = BatchRun(db, Limits()).run(items(media_posts.id, ids))
    assert set(outcomes(results).values()) == {"completed"}
    assert actual_index(db) == expected_index(db)
    assert all(get_work(db, media_posts.id, i) is None for i in ids)


def test_a_large_claim_is_worked_a_chunk_at_a_time(db, media_posts, monkeypatch) -> None:
    """A message of 250 items is one claim, read and written in chunks of ``READ_CHUNK``: every
    item is indexed, and no read holds more than a chunk's entries."""
    import media_usage_worker.pipeline.batch as batch

    ids = write(db, 250)
    real_read = projection.read_entries
    sizes: list[int] = []

    def counted(*args, **kwargs):
        sizes.append(len(args[3]))
        return real_read(*args, **kwargs)

    monkeypatch.setattr(projection, "read_entries", counted)
    results = BatchRun(db, Limits()).run(items(media_posts.id, ids))
    assert set(outcomes(results).values()) == {"completed"} and len(results) == 250
    assert sizes == [batch.READ_CHUNK, batch.READ_CHUNK, 250 - 2 * batch.READ_CHUNK]
    assert actual_index(db) == expected_index(db)
    assert all(get_work(db, media_posts.id, i) is None for i in ids)


def test_out_of_time_in_a_later_chunk_keeps_the_chunks_already_done(
    db, media_posts, monkeypatch
) -> None:
    """The soft limit arrives in the second chunk: the first chunk's items stay completed,
    the entry that took the time is charged, and the rest go back uncharged."""
    import media_usage_worker.pipeline.batch as batch

    ids = write(db, 150)
    real_plan = batch.plan_refresh

    def slow_on_e120(state, *args, **kwargs):
        if state.entry.content_id == "e120":
            raise OutOfTime
        return real_plan(state, *args, **kwargs)

    monkeypatch.setattr(batch, "plan_refresh", slow_on_e120)
    results = BatchRun(db, Limits(), interrupts=(OutOfTime,)).run(items(media_posts.id, ids))
    found = outcomes(results)
    assert len(results) == 150
    assert {found[i] for i in ids[:100]} == {"completed"}
    assert found["e120"] == "retry" and get_work(db, media_posts.id, "e120")["attempt_count"] == 1
    rest = [i for i in ids[100:] if i != "e120"]
    assert {found[i] for i in rest} == {"retry"}
    assert {get_work(db, media_posts.id, i)["attempt_count"] for i in rest} == {0}


def test_entries_sharing_a_media_file_url_all_resolve_it_with_one_read(
    db, media_posts, monkeypatch
) -> None:
    """Three entries of one batch name the same file by URL, one names a file no item has: the
    keys are read once for the chunk, and each entry that met a key is planned again with it."""
    from media_usage_worker.repository.base.schema import media

    with db.begin() as conn:
        conn.execute(media.insert().values(
            id="m-photo", filename="photo.jpg", mime_type="image/jpeg", storage_key="photo.jpg"
        ))  # fmt: skip
    for content_id, key in (("u1", "photo.jpg"), ("u2", "photo.jpg"), ("u3", "photo.jpg"),
                            ("u4", "missing.jpg")):  # fmt: skip
        sql(db, "INSERT INTO ec_posts (id, hero) VALUES (:i, :h)", i=content_id,
            h=f"/_emdash/api/media/file/{key}")  # fmt: skip
    reads: list[set[str]] = []
    real = projection.media_ids_by_storage_keys

    def counted(bind, keys):
        reads.append(set(keys))
        return real(bind, keys)

    monkeypatch.setattr(projection, "media_ids_by_storage_keys", counted)
    results = BatchRun(db, Limits()).run(items(media_posts.id, ["u1", "u2", "u3", "u4"]))
    assert set(outcomes(results).values()) == {"completed"}
    assert reads == [{"photo.jpg", "missing.jpg"}]
    assert actual_index(db) == expected_index(db)
    assert len([r for r in actual_index(db) if r[3] == "m-photo"]) == 3


def test_each_item_of_a_mixed_batch_ends_as_itself(db, media_posts) -> None:
    ids = write(db, 6)
    # e000: its message is stale (the row is at version 2 after a second write).
    sql(db, "UPDATE ec_posts SET hero = 'm-new' WHERE id = 'e000'")
    # e001: its draft revision is missing: retried with the snapshot code.
    sql(
        db,
        "INSERT INTO revisions (id, collection, entry_id, data) VALUES ('r', 'posts', 'x', '{}')",
    )
    sql(db, "UPDATE ec_posts SET draft_revision_id = 'r' WHERE id = 'e001'")
    set_work(db, media_posts.id, "e001", work_version=1)
    # e003: written by the host after the batch read it, before its write.
    batch = items(media_posts.id, ids)

    def host_writes_e003() -> None:
        sql(db, "UPDATE ec_posts SET hero = 'm-late' WHERE id = 'e003'")

    results = BatchRun(db, Limits(), before_write=host_writes_e003).run(batch)
    found = outcomes(results)
    assert found["e000"] == "claim_lost"
    assert found["e001"] == "retry"
    assert get_work(db, media_posts.id, "e001")["last_error_code"] == "MEDIA_USAGE_SNAPSHOT_FAILED"
    assert found["e003"] == "superseded"  # its lease was fenced by the host's write
    assert found["e002"] == found["e004"] == found["e005"] == "completed"
    assert get_work(db, media_posts.id, "e003")["state"] == "pending"
    assert get_work(db, media_posts.id, "e000")["state"] == "pending"


def test_an_item_over_the_resource_limit_fails_alone(db, media_posts) -> None:
    ids = write(db, 3)
    sql(db, "UPDATE ec_posts SET hero = NULL WHERE id IN ('e000', 'e002')")
    for content_id in ("e000", "e002"):
        set_work(db, media_posts.id, content_id, work_version=1)
    # e001 holds one image; a limit of zero occurrences refuses it and only it.
    results = BatchRun(db, Limits(max_occurrences=0)).run(items(media_posts.id, ids))
    found = outcomes(results)
    assert found == {"e000": "completed", "e001": "failed", "e002": "completed"}
    assert get_work(db, media_posts.id, "e001")["last_error_code"] == "MEDIA_USAGE_RESOURCE_LIMIT"
    assert status_row(db, media_posts.id)["status"] != "complete"


def test_items_of_a_deleted_collection_are_obsolete_and_others_are_indexed(db, media_posts) -> None:
    pages = active_collection(db, "pages", FIELDS)
    ids = write(db, 2)
    sql(db, "INSERT INTO ec_pages (id, hero) VALUES ('p1', 'm-p1')")
    sql(db, "UPDATE _emdash_collections SET slug = 'gone' WHERE id = :i", i=pages.id)
    results = BatchRun(db, Limits()).run([*items(media_posts.id, ids), Item(pages.id, "p1", 1)])
    found = outcomes(results)
    assert found == {"e000": "completed", "e001": "completed", "p1": "obsolete"}
    assert get_work(db, pages.id, "p1") is None


def test_duplicates_in_a_batch_count_once_and_bad_items_reject_it_whole() -> None:
    batch = checked_items([["c", "e1", 1], ["c", "e1", "1"], ["c", "e2", 1]])
    assert batch == [Item("c", "e1", 1), Item("c", "e2", 1)]
    for bad in (
        [],
        [["c", "e1"]],
        [["c", "e1", 0]],
        [["c", "", 1]],
        [["c", "e", 1]] * (MAX_BATCH + 1),
    ):
        with pytest.raises(InvalidArgument):
            checked_items(bad)


def test_a_batch_whose_lease_ran_out_writes_nothing(db, media_posts) -> None:
    ids = write(db, 5)

    def leases_run_out() -> None:
        sql(db, "UPDATE _emdash_media_usage_work SET lease_expires_at = :p", p=PAST)

    results = BatchRun(db, Limits(), before_write=leases_run_out).run(items(media_posts.id, ids))
    assert set(outcomes(results).values()) == {"superseded"}
    with db.connect() as conn:
        assert (
            conn.execute(sa.text("SELECT count(*) FROM _emdash_media_usage_sources")).scalar() == 0
        )
        assert conn.execute(sa.text("SELECT count(*) FROM _emdash_media_usage")).scalar() == 0


def test_two_workers_given_overlapping_batches_process_each_item_once(db, media_posts) -> None:
    ids = write(db, 80)
    first, second = items(media_posts.id, ids[:60]), items(media_posts.id, ids[20:])
    start = threading.Barrier(2)
    results: list = []

    def worker(batch: list[Item]) -> None:
        start.wait(timeout=30)
        results.extend(BatchRun(db, Limits()).run(batch))

    threads = [threading.Thread(target=worker, args=(b,)) for b in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    completed = [r.content_id for r in results if r.outcome == "completed"]
    assert sorted(completed) == sorted(ids)  # every item exactly once
    assert {str(r.outcome) for r in results} <= {"completed", "claim_lost"}
    assert actual_index(db) == expected_index(db)


def test_an_entry_written_meanwhile_by_a_repair_is_read_again_alone(db, media_posts) -> None:
    ids = write(db, 3)
    entry = ContentEntry(media_posts.id, "posts", "e001")

    def a_repair_refreshes_e001() -> None:
        assert refresh_entry(db, entry, Limits()) is None  # no lease, as repair writes

    results = BatchRun(db, Limits(), before_write=a_repair_refreshes_e001).run(
        items(media_posts.id, ids)
    )
    # e001's compare-and-set lost to the repair; read again on its own, it is unchanged.
    assert set(outcomes(results).values()) == {"completed"}
    assert get_work(db, media_posts.id, "e001") is None
    assert actual_index(db) == expected_index(db)


class OutOfTime(Exception):
    """Stands for the worker's soft time limit."""


def test_the_soft_limit_stops_the_batch_and_gives_every_claimed_item_back(db, media_posts) -> None:
    pages = active_collection(db, "pages", FIELDS)
    ids = write(db, 3)
    sql(db, "INSERT INTO ec_pages (id, hero) VALUES ('p1', 'm-p1')")

    def time_is_up() -> None:
        raise OutOfTime

    run = BatchRun(db, Limits(), interrupts=(OutOfTime,), before_write=time_is_up)
    results = run.run([*items(media_posts.id, ids), Item(pages.id, "p1", 1)])
    found = {r.content_id: (str(r.outcome), r.error_code) for r in results}
    assert found == {
        **{i: ("retry", "MEDIA_USAGE_TIME_LIMIT") for i in ids},
        "p1": ("claim_lost", None),  # never claimed: still due, sent again by a later tick
    }
    assert get_work(db, pages.id, "p1")["state"] == "pending"
    assert all(get_work(db, media_posts.id, i)["attempt_count"] == 1 for i in ids)


def test_only_the_entry_that_ran_out_of_time_is_charged(db, media_posts, monkeypatch) -> None:
    import media_usage_worker.pipeline.batch as batch

    ids = write(db, 5)
    real_plan = batch.plan_refresh

    def slow_on_e002(state, *args, **kwargs):
        if state.entry.content_id == "e002":
            raise OutOfTime  # the soft limit, arriving while e002 is extracted
        return real_plan(state, *args, **kwargs)

    monkeypatch.setattr(batch, "plan_refresh", slow_on_e002)
    results = BatchRun(db, Limits(), interrupts=(OutOfTime,)).run(items(media_posts.id, ids))
    found = {r.content_id: (str(r.outcome), r.error_code) for r in results}
    assert found == {
        **{i: ("retry", None) for i in ids if i != "e002"},
        "e002": ("retry", "MEDIA_USAGE_TIME_LIMIT"),
    }
    for content_id in ids:
        row = get_work(db, media_posts.id, content_id)
        charged = content_id == "e002"
        assert (row["attempt_count"], row["lease_token"]) == (int(charged), None)
        assert row["state"] == ("retry" if charged else "pending")
    # The innocents are due again at once; the culprit after its backoff.
    due = {r.content_id for r in MediaUsageWorkRepository(db).find_due_work(100)}
    assert due == set(ids) - {"e002"}


def test_a_repair_page_rereads_alone_only_the_entry_written_meanwhile(
    db, media_posts, monkeypatch
) -> None:
    ids = write(db, 5)
    real_read = projection.read_entries

    def read_then_a_host_writes_e002(*args, **kwargs):
        state = real_read(*args, **kwargs)
        if len(args[3]) > 1:  # the page's read, not the entry's read of its own
            sql(db, "UPDATE ec_posts SET hero = 'm-new', version = version + 1 WHERE id = 'e002'")
        return state

    monkeypatch.setattr(projection, "read_entries", read_then_a_host_writes_e002)
    codes = refresh_entries(db, media_posts.id, "posts", ids, Limits())
    assert codes == dict.fromkeys(ids)
    # The page's write of e002 lost its compare-and-set; read again alone, it has the new hero.
    assert actual_index(db) == expected_index(db)
    assert any(r[0].endswith(":e002:columns") and r[3] == "m-new" for r in actual_index(db))


def test_a_repair_page_with_a_hostile_row_fails_that_entry_alone(db, media_posts) -> None:
    ids = write(db, 3)
    sql(db, "UPDATE ec_posts SET hero = :h WHERE id = 'e001'", h="{" * 100)
    codes = refresh_entries(db, media_posts.id, "posts", ids, Limits(max_entry_chars=50))
    assert codes["e000"] is None and codes["e002"] is None
    assert codes["e001"] == "CONTENT_USAGE_RESOURCE_LIMIT"
    indexed = {key.split(":")[2] for key in actual_source_keys(db)}
    assert indexed == {"e000", "e002"}


def _planned_writes(db: sa.Engine, collection_id: str, ids: list[str]) -> list[EntryWrite]:
    """Claim ``ids`` as one batch and plan each entry's write under its lease."""
    claimed = MediaUsageWorkRepository(db).claim_batch(collection_id, [(i, 1) for i in ids], 60)
    state = projection.read_entries(db, collection_id, "posts", ids, columns_to_read)
    urls = media_urls(db, state)
    plans = [
        plan_refresh(state.entries[r.content_id], state.fields, Limits(), r.lease, urls=urls)
        for r in sorted(claimed, key=lambda r: r.content_id)
    ]
    assert all(isinstance(plan, EntryWrite) for plan in plans)
    return plans  # type: ignore[return-value]


def _host_write_without_waiting(url: str, content_id: str) -> None:
    """The host's content write, failing at once where it would have to wait for a lock."""
    writer = create_engine(url, poolclass=sa.NullPool)
    try:
        with writer.connect() as conn:
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql("PRAGMA busy_timeout = 0")
                conn.commit()  # the pragma began a transaction; the write's own comes next
            with conn.begin():
                if conn.dialect.name == "postgresql":
                    conn.exec_driver_sql("SET LOCAL lock_timeout = '50ms'")
                conn.execute(
                    sa.text("UPDATE ec_posts SET hero = 'm-late' WHERE id = :i"), {"i": content_id}
                )
    finally:
        writer.dispose()


def test_a_batch_write_holds_its_leases_until_it_commits(db, media_posts, migrated_url) -> None:
    # A content write that committed between the batch's lease check and its promotion would
    # let the batch write under a lease that no longer holds (the chaos audit caught one).
    ids = write(db, 2)
    plans = _planned_writes(db, media_posts.id, ids)
    with db.connect() as conn, transaction(conn):
        assert apply_writes(conn, plans) == [True, True]
        with pytest.raises(sa.exc.OperationalError):
            _host_write_without_waiting(migrated_url, "e000")
    _host_write_without_waiting(migrated_url, "e000")  # the batch committed: nothing to wait for
    assert get_work(db, media_posts.id, "e000")["work_version"] == 2


def test_a_batch_skips_an_entry_whose_work_row_is_being_written(db, media_posts, dialect) -> None:
    if dialect == "sqlite":
        pytest.skip("SQLite has no row locks: a content write keeps every other writer out")
    ids = write(db, 2)
    plans = _planned_writes(db, media_posts.id, ids)
    with db.connect() as host, host.begin():
        # Not committed: the capture trigger holds e000's work row while it bumps its version.
        host.execute(sa.text("UPDATE ec_posts SET hero = 'm-late' WHERE id = 'e000'"))
        # The batch neither waits for the host nor writes e000 under a lease in doubt.
        assert write_entries(db, plans) == [False, True]
    assert get_work(db, media_posts.id, "e000")["work_version"] == 2
    assert {key.split(":")[2] for key in actual_source_keys(db)} == {"e001"}


def test_a_soft_limit_arriving_mid_statement_still_gives_the_items_back(
    db, media_posts, dialect
) -> None:
    """The worker's soft limit is a signal: arriving while a statement waits on the server, it
    leaves the driver with a command in progress, so the transaction's rollback fails too. The
    interrupt must still be what the batch sees (it was once hidden behind the rollback's
    error, and the item stayed leased until its lease ran out)."""
    if dialect == "sqlite":
        pytest.skip("SQLite waits for a lock inside C, where no Python signal handler runs")
    ids = write(db, 2)

    def time_is_up(*_: object) -> None:
        raise OutOfTime

    def interrupt_once_the_write_waits(worker: int) -> None:
        """The signal, sent when the batch's statement waits on the server's lock (a poll
        with a deadline: however slow the machine, only once it waits)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with db.connect() as conn:
                waiting = conn.execute(sa.text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )).scalar_one()  # fmt: skip
            if waiting:
                signal.pthread_kill(worker, signal.SIGALRM)
                return
            time.sleep(0.02)  # polling another backend's state

    run = BatchRun(db, Limits(), interrupts=(OutOfTime,))
    previous = signal.signal(signal.SIGALRM, time_is_up)
    watcher = threading.Thread(
        target=interrupt_once_the_write_waits, args=(threading.get_ident(),), daemon=True
    )
    try:
        with db.connect() as blocker, blocker.begin():
            # The batch's write locks its collection row first: it waits here, on the server.
            blocker.execute(
                sa.text("SELECT id FROM _emdash_collections WHERE id = :i FOR UPDATE"),
                {"i": media_posts.id},
            )
            watcher.start()
            results = run.run(items(media_posts.id, ids))
    finally:
        watcher.join(timeout=60)
        signal.signal(signal.SIGALRM, previous)
    found = {r.content_id: (str(r.outcome), r.error_code) for r in results}
    assert found == dict.fromkeys(ids, ("retry", "MEDIA_USAGE_TIME_LIMIT"))
    assert all(get_work(db, media_posts.id, i)["attempt_count"] == 1 for i in ids)
