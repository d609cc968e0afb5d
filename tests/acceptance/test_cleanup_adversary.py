"""The clean-up against an adversary, with a real worker and beat (both dialects): writers put
references to random library items into every shape the site can hold them in (ids, media URLs
in fields and inside HTML, Markdown, link annotations and prose, nesting near and past the
depth bound, drafts edited in place, settings, an undeclared table), while ``retire
--all-unused``, ``restore`` and ``purge`` run in a loop over a storage directory with shared
keys, a symlink, a directory and a key that points outside it.

The oracle knows nothing of the extractor: it is what the writers wrote, searched as raw text
for each item's id and storage key, at the database time of each write. Invariants:

- no item is retired while a row of a captured table, as committed before the retirement,
  names it in a form a site uses (an id where an id goes, a URL of its file anywhere);
- no item is purged while any row of any host table, as committed before the purge began,
  mentions its id or its storage key anywhere (the final sweep's promise: it reads each table
  as committed when it reads it);
- a file is deleted only if every item naming its key was purged, and the file of every item
  still in the library or the quarantine is on disk (a symlink's target too);
- no current reference is to a quarantined item, and a dangling one is to a purged item only
  (a later use of an item gone for good).

Seeded (``MEDIA_USAGE_ADVERSARY_SEED``); ``MEDIA_USAGE_ADVERSARY_SECONDS`` sets the length (CI
runs 15 s per dialect; run it longer on demand).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from media_usage_worker.domain.cleanup import UnusedFilter
from media_usage_worker.domain.content_model import FieldDefinition
from media_usage_worker.domain.host_sources import ColumnKind, HostSource, SourceKind
from media_usage_worker.domain.reference_paths import parse_reference_path
from media_usage_worker.pipeline.capture import activate, declare_source, remove_declared_source
from media_usage_worker.pipeline.cleanup import restore, retire_all_unused
from media_usage_worker.pipeline.purge import PurgeTarget, purge
from media_usage_worker.pipeline.registry import declare_reference_path, remove_reference_path
from media_usage_worker.repository.base.clock import db_now
from media_usage_worker.repository.base.schema import media
from media_usage_worker.repository.quarantine.cleanup import dangling
from media_usage_worker.repository.registry.collections import create_collection
from tests.index_oracle import expected_index
from tests.processes import wait_for

SEED = int(os.environ.get("MEDIA_USAGE_ADVERSARY_SEED", "20261206"))
SECONDS = float(os.environ.get("MEDIA_USAGE_ADVERSARY_SECONDS", "15"))
ENTRIES, SETTINGS, NOTES, PEOPLE, LIBRARY = 16, 4, 4, 4, 60
# A declared source the writers use for the whole run, and one the operator adds and removes.
LINKS = HostSource(SourceKind.TABLE, "menu_links", "id", (("link", ColumnKind.URL),))
SPARE = HostSource(SourceKind.TABLE, "spare_links", "id", (("link", ColumnKind.URL),))
# A rule the operator declares and removes again: coverage leaves ``complete`` each time.
PROMO = "body[_type=promo].items[].ref"
FILE_URL = "/_emdash/api/media/file/"
FIELDS = [
    FieldDefinition("hero", "Hero", "image"),
    FieldDefinition("body", "Body", "portableText"),
    FieldDefinition("html", "Html", "text"),
    FieldDefinition("notes", "Notes", "string"),
]


def _key(n: int) -> str:
    """Item ``n``'s storage key: its own file, except the hostile few."""
    return {
        51: "f050.png",  # shared with m050
        52: "link052.png",  # a symlink to m053's file
        54: "dir054",  # a directory
        55: "../outside055.png",  # outside the storage directory
    }.get(n, f"f{n:03d}.png")


IDS = [f"m{n:03d}" for n in range(LIBRARY)]
KEYS = {f"m{n:03d}": _key(n) for n in range(LIBRARY)}


@dataclass(frozen=True)
class Write:
    at: str
    row: str  # table:key
    captured: bool
    # Items the row names in a form a site uses (ids where ids go, URLs of their files).
    uses: frozenset[str]
    # Items whose id or storage key the row's text mentions anywhere.
    mentions: frozenset[str]
    # A database time read after the write committed: a purge that started later must see it.
    committed_at: str = ""


def _mentioned(text: str) -> frozenset[str]:
    return frozenset(i for i in IDS if i in text or KEYS[i] in text)


def _by_url(key: str) -> frozenset[str]:
    return frozenset(i for i in IDS if KEYS[i] == key)


@dataclass
class Site:
    """What the writers wrote last to each row's columns, and every write's record."""

    rng: random.Random
    values: dict[str, dict[str, str | None]] = field(default_factory=dict)
    uses: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)
    log: list[Write] = field(default_factory=list)
    too_deep: set[str] = field(default_factory=set)


def _deep(depth: int, leaf: object) -> dict[str, object]:
    value: dict[str, object] = {"_type": "note", "leaf": leaf}
    for _ in range(depth):
        value = {"_type": "note", "child": value}
    return value


def _content_value(rng: random.Random, column: str, item: str) -> tuple[str | None, frozenset[str]]:
    """A value for one column of a page naming ``item`` in a shape chosen at random."""
    key = KEYS[item]
    url = FILE_URL + key
    if rng.random() < 0.2:
        return None, frozenset()
    if column == "hero":
        return (item, frozenset({item})) if rng.random() < 0.5 else (url, _by_url(key))
    if column == "body":
        shape = rng.randrange(4)
        if shape == 0:
            block: object = {"_type": "image", "asset": {"_ref": item}}
            return json.dumps([block]), frozenset({item})
        if shape == 1:
            link = {"_type": "block", "children": [{"_type": "span", "text": "get it"}],
                    "markDefs": [{"_key": "k", "_type": "link", "href": url}]}  # fmt: skip
            return json.dumps([link]), _by_url(key)
        depth = 150 if shape == 2 else 260  # within the bound, and past it
        return json.dumps([_deep(depth, f"see {url}")]), _by_url(key)
    if column == "html":
        return f'<figure><img src="{url}" alt=""></figure>', _by_url(key)
    return rng.choice([f"[the file]({url})", f"Download it at {url}."]), _by_url(key)


def _write(engine: sa.Engine, site: Site, stop: threading.Event) -> None:
    rng = site.rng
    item = rng.choice(IDS)
    kind = rng.random()
    if kind < 0.55:
        entry = f"e{rng.randrange(ENTRIES):02d}"
        column = rng.choice(["hero", "body", "html", "notes"])
        value, uses = _content_value(rng, column, item)
        row, table = f"page:{entry}", "ec_pages"
        statement = f"UPDATE ec_pages SET {column} = :v WHERE id = :k"
        params = {"v": value, "k": entry}
        deep = column == "body" and value is not None and value.count('"child"') > 200
    elif kind < 0.7:
        entry = f"e{rng.randrange(ENTRIES):02d}"
        value, uses = (
            (json.dumps({"hero": item}), frozenset({item}))
            if rng.random() < 0.6
            else (
                json.dumps({"html": f'<a href="{FILE_URL}{KEYS[item]}">x</a>'}),
                _by_url(KEYS[item]),
            )
        )
        row, table, column = f"draft:{entry}", "revisions", "data"
        statement = "UPDATE revisions SET data = :v WHERE entry_id = :k"
        params, deep = {"v": value, "k": entry}, False
    elif kind < 0.75:
        user = f"u{rng.randrange(PEOPLE)}"
        value, uses = item, frozenset({item})
        row, table, column = f"user:{user}", "users", "avatar_id"
        statement = "UPDATE users SET avatar_id = :v WHERE id = :k"
        params, deep = {"v": value, "k": user}, False
    elif kind < 0.8:
        link = f"k{rng.randrange(PEOPLE)}"
        value, uses = FILE_URL + KEYS[item], _by_url(KEYS[item])
        row, table, column = f"menu:{link}", "menu_links", "link"
        statement = "UPDATE menu_links SET link = :v WHERE id = :k"
        params, deep = {"v": value, "k": link}, False
    elif kind < 0.88:
        name = f"site:s{rng.randrange(SETTINGS)}"
        value, uses = (
            (json.dumps({"logo": {"mediaId": item}}), frozenset({item}))
            if (rng.random() < 0.5)
            else (json.dumps({"icon": FILE_URL + KEYS[item]}), _by_url(KEYS[item]))
        )
        row, table, column = f"option:{name}", "options", "value"
        statement = "UPDATE options SET value = :v WHERE name = :k"
        params, deep = {"v": value, "k": name}, False
    else:
        note = f"n{rng.randrange(NOTES)}"
        value = rng.choice([f"old banner {KEYS[item]}", f"asset {item} kept for legal"])
        uses, row, table, column = frozenset(), f"note:{note}", "host_notes", "body"
        statement = "UPDATE host_notes SET body = :v WHERE id = :k"
        params, deep = {"v": value, "k": note}, False
    with engine.begin() as conn:
        conn.execute(sa.text(statement), params)
        at = conn.execute(sa.select(db_now())).scalar_one()
    with engine.connect() as conn:
        committed_at = conn.execute(sa.select(db_now())).scalar_one()
    site.values.setdefault(row, {})[column] = value
    site.uses.setdefault(row, {})[column] = uses
    if deep:
        site.too_deep.add(row)
    elif table == "ec_pages" and column == "body":
        site.too_deep.discard(row)
    text = " ".join(v for v in site.values[row].values() if v)
    row_uses = frozenset().union(*site.uses[row].values())
    site.log.append(Write(at, row, table != "host_notes", row_uses, _mentioned(text), committed_at))


def _build(engine: sa.Engine, storage: Path) -> None:
    create_collection(engine, "pages", "Pages", FIELDS)
    with engine.begin() as conn:
        conn.execute(media.insert(), [
            {"id": i, "filename": f"{i}.png", "mime_type": "image/png", "storage_key": KEYS[i],
             "size": 1, "created_at": "2020-01-01 00:00:00"}
            for i in IDS
        ])  # fmt: skip
        for n in range(ENTRIES):
            conn.execute(
                sa.text("INSERT INTO revisions (id, collection, entry_id, data) "
                        "VALUES (:r, 'pages', :e, '{}')"),
                {"r": f"r{n:02d}", "e": f"e{n:02d}"},
            )  # fmt: skip
            conn.execute(
                sa.text("INSERT INTO ec_pages (id, draft_revision_id) VALUES (:e, :r)"),
                {"e": f"e{n:02d}", "r": f"r{n:02d}"},
            )
        for n in range(SETTINGS):
            conn.execute(sa.text("INSERT INTO options (name, value) VALUES (:n, '{}')"),
                         {"n": f"site:s{n}"})  # fmt: skip
        conn.execute(sa.text("CREATE TABLE host_notes (id TEXT PRIMARY KEY, body TEXT)"))
        for n in range(NOTES):
            conn.execute(sa.text("INSERT INTO host_notes VALUES (:n, '')"), {"n": f"n{n}"})
        for n in range(PEOPLE):
            conn.execute(sa.text("INSERT INTO users (id, email) VALUES (:u, :e)"),
                         {"u": f"u{n}", "e": f"u{n}@example.org"})  # fmt: skip
        for table in (LINKS.table, SPARE.table):
            conn.execute(sa.text(f"CREATE TABLE {table} (id TEXT PRIMARY KEY, link TEXT)"))
        for n in range(PEOPLE):
            conn.execute(sa.text("INSERT INTO menu_links VALUES (:k, NULL)"), {"k": f"k{n}"})
    declare_source(engine, LINKS)
    for item, key in KEYS.items():
        if key in ("link052.png", "dir054") or key.startswith(".."):
            continue
        (storage / key).write_bytes(item.encode())
    (storage / "link052.png").symlink_to(storage / "f053.png")
    (storage / "dir054").mkdir()
    (storage.parent / "outside055.png").write_bytes(b"outside")


def _change_the_rules(engine: sa.Engine, rounds: int) -> None:
    """Now and then, a rule or a source added or removed while everything else runs."""
    if rounds % 7 == 3:
        declare_reference_path(engine, "pages", parse_reference_path(PROMO))
    elif rounds % 7 == 5:
        remove_reference_path(engine, "pages", PROMO)
    elif rounds % 11 == 4:
        declare_source(engine, SPARE)
    elif rounds % 11 == 8:
        remove_declared_source(engine, SPARE.table)


def _all_complete(engine: sa.Engine) -> bool:
    with engine.connect() as conn:
        return not conn.execute(
            sa.text("SELECT count(*) FROM _emdash_media_usage_index_status "
                    "WHERE status <> 'complete'")
        ).scalar_one()  # fmt: skip


def _state_at(log: list[Write], at: str) -> dict[str, Write]:
    state: dict[str, Write] = {}
    for write in log:
        if write.at >= at:
            break
        state[write.row] = write
    return state


def _committed_before(log: list[Write], at: str) -> dict[str, Write]:
    """Each row as the writes that had certainly committed by ``at`` left it."""
    state: dict[str, Write] = {}
    for write in sorted(log, key=lambda w: w.committed_at):
        if write.committed_at >= at:
            break
        state[write.row] = write
    return state


def _actions(engine: sa.Engine, action: str) -> list[tuple[str, list[str]]]:
    with engine.connect() as conn:
        return [
            (at, json.loads(ids))
            for at, ids in conn.execute(
                sa.text("SELECT at, media_ids FROM _media_usage_worker_audit "
                        "WHERE action = :a ORDER BY at"), {"a": action},
            )
        ]  # fmt: skip


def test_nothing_used_is_retired_or_purged_whatever_the_adversary_writes(
    db, processes, tmp_path
) -> None:
    storage = tmp_path / "storage"
    storage.mkdir()
    _build(db, storage)
    activate(db)
    processes.env["MEDIA_USAGE_RECONCILE_SECONDS"] = "1"
    processes.worker(concurrency=2)
    processes.beat()
    wait_for(lambda: _all_complete(db), timeout=120)

    stop = threading.Event()
    site = Site(random.Random(SEED))
    errors: list[str] = []
    counts = {"retired": 0, "purged": 0, "kept": 0}
    sweeps: list[str] = []  # when each purge began, by the database clock
    target = PurgeTarget(directory=storage.resolve())

    def writer() -> None:
        while not stop.is_set():
            burst_end = time.monotonic() + 1.0
            while time.monotonic() < burst_end and not stop.is_set():
                try:
                    _write(db, site, stop)
                except Exception as exc:  # reported below
                    errors.append(f"write: {exc!r}")
                stop.wait(0.03)  # pacing, not synchronisation
            stop.wait(1.5)  # a pause, so that coverage does become complete now and then

    def operator() -> None:
        rng = random.Random(SEED + 1)
        rounds = 0
        while not stop.is_set():
            rounds += 1
            try:
                _change_the_rules(db, rounds)
                done = retire_all_unused(db, UnusedFilter(), actor="adversary")
                counts["retired"] += len(done.retired)
                if done.retired and rng.random() < 0.3:
                    restore(db, rng.sample(done.retired, 1), actor="adversary")
                with db.connect() as conn:  # the sweep reads the site as it is from now on
                    sweeps.append(conn.execute(sa.select(db_now())).scalar_one())
                report = purge(db, 0, actor="adversary", target=target)
                counts["purged"] += len(report.purged)
                counts["kept"] += len(report.kept)
            except Exception as exc:  # reported below
                errors.append(f"operator: {exc!r}")
            stop.wait(0.2)

    threads = [threading.Thread(target=writer), threading.Thread(target=operator)]
    for thread in threads:
        thread.start()
    stop.wait(SECONDS)
    stop.set()
    for thread in threads:
        thread.join(120)
    assert errors == [], errors[:5]
    # Entries left past the depth bound fail for good: written once more, readable, they settle.
    with db.begin() as conn:
        for row in sorted(site.too_deep):
            conn.execute(sa.text("UPDATE ec_pages SET body = NULL WHERE id = :e"),
                         {"e": row.split(":", 1)[1]})  # fmt: skip
    with db.begin() as conn:
        conn.execute(sa.text("UPDATE _emdash_media_usage_work SET state = 'pending', "
                             "attempt_count = 0 WHERE state = 'failed'"))  # fmt: skip
    wait_for(lambda: _all_complete(db), timeout=180)

    log = sorted(site.log, key=lambda w: w.at)
    for retired_at, ids in _actions(db, "retire"):
        state = _state_at(log, retired_at)
        users = {w.row: sorted(w.uses & set(ids)) for w in state.values()
                 if w.captured and w.uses & set(ids)}  # fmt: skip
        assert users == {}, ("retired while used", retired_at, users)
    purged: set[str] = set()
    for purged_at, ids in _actions(db, "purge"):
        purged.update(ids)
        # The sweep reads each table as committed when it reads it (docs/design.md, "The final
        # sweep"): what had committed before the purge began must have been seen.
        state = _committed_before(log, max(s for s in sweeps if s <= purged_at))
        mentions = {w.row: sorted(w.mentions & set(ids)) for w in state.values()
                    if w.mentions & set(ids)}  # fmt: skip
        assert mentions == {}, ("purged while mentioned", purged_at, mentions)

    with db.connect() as conn:
        kept = set(conn.execute(sa.text(
            "SELECT id FROM media UNION SELECT id FROM _media_usage_worker_quarantine"
        )).scalars())  # fmt: skip
        retired = set(conn.execute(sa.text(
            "SELECT id FROM _media_usage_worker_quarantine")).scalars())  # fmt: skip
    for item in kept:
        key = KEYS[item]
        if key == "link052.png":
            assert (storage / "f053.png").exists() or "m053" in purged
            continue
        if key in ("dir054",) or key.startswith(".."):
            continue
        assert (storage / key).exists(), (item, key)
    assert (storage / "dir054").is_dir() and (storage.parent / "outside055.png").exists()
    for item in IDS:
        key = KEYS[item]
        if (
            not key.startswith(("f", "link"))
            or (storage / key).exists()
            or (key == "link052.png" and (storage / key).is_symlink())
        ):
            continue
        owners = {i for i in IDS if KEYS[i] == key}
        assert owners <= purged, ("file deleted for an item not purged", key, owners - purged)
    in_use = {row[3] for row in expected_index(db)}
    assert in_use.isdisjoint(retired), sorted(in_use & retired)
    found, _ = dangling(db, 1000)
    assert {row[0] for row in found} <= purged, found
    print(
        f"adversary (seed {SEED}): {len(log)} writes, {counts['retired']} retirements, "
        f"{counts['purged']} purged, {counts['kept']} kept by purge"
    )
    assert len(log) > SECONDS * 5 and counts["retired"] > 0
