"""Capture triggers on ``ec_<slug>`` tables (docs/design.md §2), for SQLite and PostgreSQL.

Each insert, update or delete of a content row, in the writer's own transaction: bumps the
collection's ``change_epoch`` (``complete`` becomes ``stale``), aborts the write with
``media usage capture inactive`` unless exactly one active status row with the registered
identity exists, and upserts the entry's work row to ``pending`` with ``work_version + 1`` —
even over a live lease, whose holder then loses every compare-and-set.

This is trigger DDL, which SQLAlchemy Core cannot express, so it is SQL text. The only values
spliced into it are the collection identity, validated here, and quoted as SQL literals.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

import sqlalchemy as sa

from media_usage_worker.domain.errors import UnsafeIdentity
from media_usage_worker.domain.host_sources import HostSource
from media_usage_worker.repository.registry.content_tables import content_table_name

CAPTURE_TRIGGER_VERSION = 1
TRIGGER_PREFIX = "emdash_mu_"
POSTGRES_FUNCTION = "emdash_media_usage_capture_work"
EVENTS = (("ai", "INSERT", "NEW"), ("au", "UPDATE", "NEW"), ("ad", "DELETE", "OLD"))
INACTIVE_MESSAGE = "media usage capture inactive"

_SAFE_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")
_SAFE_SLUG = re.compile(r"[a-z][a-z0-9_]{0,62}")
_SQLITE_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"


def trigger_names(collection_id: str, slug: str) -> dict[str, str]:
    """emdash's names: ``emdash_mu_<first 16 bytes of sha256('1:<id>:<slug>') hex>_<event>``."""
    digest = hashlib.sha256(f"{CAPTURE_TRIGGER_VERSION}:{collection_id}:{slug}".encode()).digest()
    stem = f"{TRIGGER_PREFIX}{digest[:16].hex()}"
    return {suffix: f"{stem}_{suffix}" for suffix, _, _ in EVENTS}


def _checked(collection_id: str, slug: str) -> tuple[str, str]:
    if not (isinstance(collection_id, str) and _SAFE_ID.fullmatch(collection_id)):
        raise UnsafeIdentity(f"Collection id {collection_id!r} is not a safe identifier.")
    if not (isinstance(slug, str) and _SAFE_SLUG.fullmatch(slug)):
        raise UnsafeIdentity(f"Collection slug {slug!r} is not a safe identifier.")
    return collection_id, slug


_WORK_COLUMNS = (
    "collection_id, collection_slug, content_id, change_epoch, work_version, state, "
    "attempt_count, next_attempt_at, lease_token, lease_expires_at, last_attempted_at, "
    "last_error_code, created_at, updated_at"
)
# Same reset as every other enqueue path; unconditional, so a live lease is fenced by version.
_WORK_CONFLICT = """
    ON CONFLICT (collection_id, content_id) DO UPDATE SET
        collection_slug = excluded.collection_slug,
        change_epoch = excluded.change_epoch,
        work_version = _emdash_media_usage_work.work_version + 1,
        state = 'pending',
        attempt_count = 0,
        next_attempt_at = excluded.next_attempt_at,
        lease_token = NULL,
        lease_expires_at = NULL,
        last_attempted_at = NULL,
        last_error_code = NULL,
        updated_at = excluded.updated_at"""


def _sqlite_bump_epoch(status_row: str, registered: str) -> str:
    """SQLite trigger body: move the scope's epoch (``complete`` becomes ``stale``) while its
    capture is active and it is registered; else abort the write."""
    return f"""    UPDATE _emdash_media_usage_index_status SET
        change_epoch = change_epoch + 1,
        status = CASE WHEN status = 'complete' THEN 'stale' ELSE status END,
        completed_at = CASE WHEN status = 'complete' THEN NULL ELSE completed_at END,
        updated_at = {_SQLITE_NOW}
    WHERE {status_row}
        AND {registered};
    SELECT RAISE(ABORT, '{INACTIVE_MESSAGE}') WHERE changes() <> 1;"""


def _sqlite_trigger(name: str, event: str, row: str, table: str, cid: str, slug: str) -> str:
    status_row = f"""adapter_id = 'content-media' AND scope_type = 'collection'
            AND scope_key = '{slug}' AND collection_id = '{cid}' AND capture_state = 'active'"""
    registered = (
        f"EXISTS (SELECT 1 FROM _emdash_collections WHERE id = '{cid}' AND slug = '{slug}')"
    )
    return f"""CREATE TRIGGER {name} AFTER {event} ON {table} FOR EACH ROW
BEGIN
{_sqlite_bump_epoch(status_row, registered)}
    INSERT INTO _emdash_media_usage_work ({_WORK_COLUMNS})
    SELECT '{cid}', '{slug}', {row}.id, change_epoch, 1, 'pending', 0, {_SQLITE_NOW},
        NULL, NULL, NULL, NULL, {_SQLITE_NOW}, {_SQLITE_NOW}
    FROM _emdash_media_usage_index_status WHERE {status_row}{_WORK_CONFLICT};
END"""


def _pg_bump_epoch(scope: str, registered: str) -> str:
    """PL/pgSQL: move the scope's epoch (``complete`` becomes ``stale``) while its capture is
    active and it is registered, into ``v_epoch``; else refuse the write."""
    return f"""    UPDATE _emdash_media_usage_index_status AS s SET
        change_epoch = s.change_epoch + 1,
        status = CASE WHEN s.status = 'complete' THEN 'stale' ELSE s.status END,
        completed_at = CASE WHEN s.status = 'complete' THEN NULL ELSE s.completed_at END,
        updated_at = v_now
    WHERE s.adapter_id = 'content-media' AND s.scope_type = 'collection'
        AND s.scope_key = {scope} AND s.collection_id = v_collection_id
        AND s.capture_state = 'active'
        AND {registered}
    RETURNING s.change_epoch INTO v_epoch;
    IF NOT FOUND THEN
        RAISE EXCEPTION '{INACTIVE_MESSAGE}' USING ERRCODE = 'P0001';
    END IF;"""


_COLLECTION_REGISTERED = """EXISTS (SELECT 1 FROM _emdash_collections AS c
                    WHERE c.id = v_collection_id AND c.slug = v_slug)"""
_SOURCE_REGISTERED = """EXISTS (SELECT 1 FROM _media_usage_worker_sources AS r
                    WHERE r.collection_id = v_collection_id AND r.scope_key = v_scope)"""


POSTGRES_FUNCTION_SQL = f"""
CREATE OR REPLACE FUNCTION {POSTGRES_FUNCTION}() RETURNS trigger
LANGUAGE plpgsql AS $capture$
DECLARE
    v_collection_id text := TG_ARGV[0];
    v_slug text := TG_ARGV[1];
    v_content_id text;
    v_epoch bigint;
    v_now text := to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
BEGIN
    IF TG_OP = 'DELETE' THEN v_content_id := OLD.id; ELSE v_content_id := NEW.id; END IF;
    -- The row lock taken here also serialises concurrent writers' epoch bumps: none is lost.
{_pg_bump_epoch("v_slug", _COLLECTION_REGISTERED)}
    INSERT INTO _emdash_media_usage_work ({_WORK_COLUMNS})
    VALUES (v_collection_id, v_slug, v_content_id, v_epoch, 1, 'pending', 0, v_now,
        NULL, NULL, NULL, NULL, v_now, v_now){_WORK_CONFLICT};
    RETURN NULL;
END
$capture$
"""


def _postgres_trigger(name: str, event: str, table: str, cid: str, slug: str) -> str:
    return (
        f"CREATE TRIGGER {name} AFTER {event} ON {table} FOR EACH ROW "
        f"EXECUTE FUNCTION {POSTGRES_FUNCTION}('{cid}', '{slug}')"
    )


def owned_triggers(conn: sa.Connection, slug: str) -> list[str]:
    """Names of every ``emdash_mu_`` trigger on ``ec_<slug>``."""
    return _owned_on(conn, content_table_name(slug))


def _owned_on(conn: sa.Connection, table: str) -> list[str]:
    if conn.dialect.name == "postgresql":
        query = sa.text(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = to_regclass(:t) AND NOT tgisinternal"
        )
    else:
        query = sa.text("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = :t")
    names = conn.execute(query, {"t": table}).scalars()
    return sorted(n for n in names if n.startswith(TRIGGER_PREFIX))


def _drop_owned(conn: sa.Connection, slug: str) -> None:
    """Drop every ``emdash_mu_`` trigger on ``ec_<slug>``.

    The names come from the catalog, where anyone who can create a trigger chose them, so each
    is quoted as an identifier: a name is never read as SQL.
    """
    _drop_owned_on(conn, content_table_name(slug))


def _drop_owned_on(conn: sa.Connection, table: str) -> None:
    quote = conn.dialect.identifier_preparer.quote_identifier
    suffix = f" ON {quote(table)}" if conn.dialect.name == "postgresql" else ""
    for name in _owned_on(conn, table):
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {quote(name)}{suffix}")


def install(conn: sa.Connection, collection_id: str, slug: str) -> None:
    """(Re)create the three capture triggers; drop any other ``emdash_mu_`` trigger on the table."""
    cid, slug = _checked(collection_id, slug)
    table = content_table_name(slug)
    postgres = conn.dialect.name == "postgresql"
    _drop_owned(conn, slug)
    if postgres:
        conn.exec_driver_sql(POSTGRES_FUNCTION_SQL)
    names = trigger_names(cid, slug)
    for suffix, event, row in EVENTS:
        ddl = (
            _postgres_trigger(names[suffix], event, table, cid, slug)
            if postgres
            else _sqlite_trigger(names[suffix], event, row, table, cid, slug)
        )
        conn.exec_driver_sql(ddl)


def remove(conn: sa.Connection, slug: str) -> None:
    """Drop every capture trigger on ``ec_<slug>`` (collection deletion)."""
    _checked("x", slug)
    _drop_owned(conn, slug)


# --- sources beyond content (domain.host_sources) ---------------------------------------------
# The same capture as a content table's, for a source's table: the row's key is its content
# id, the registry of sources stands where the collections' registry does, and an update
# is captured only when it touches the key or a column the source reads. An update that
# changes the key captures the old key too (that row is gone).

POSTGRES_SOURCE_FUNCTION = "emdash_media_usage_capture_source_work"
_SAFE_SOURCE_ID = re.compile(r"source-[a-z_][a-z0-9_]{0,56}")
_SAFE_SCOPE_KEY = re.compile(r"[a-z]+:[a-z_][a-z0-9_]{0,56}:[a-z_][a-z0-9_]{0,56}")

POSTGRES_SOURCE_FUNCTION_SQL = f"""
CREATE OR REPLACE FUNCTION {POSTGRES_SOURCE_FUNCTION}() RETURNS trigger
LANGUAGE plpgsql AS $capture$
DECLARE
    v_collection_id text := TG_ARGV[0];
    v_scope text := TG_ARGV[1];
    v_key_column text := TG_ARGV[2];
    v_keys text[];
    v_key text;
    v_epoch bigint;
    v_now text := to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
BEGIN
    IF TG_OP = 'INSERT' THEN
        v_keys := ARRAY[to_jsonb(NEW) ->> v_key_column];
    ELSIF TG_OP = 'DELETE' THEN
        v_keys := ARRAY[to_jsonb(OLD) ->> v_key_column];
    ELSE
        v_keys := ARRAY[to_jsonb(NEW) ->> v_key_column];
        IF (to_jsonb(OLD) ->> v_key_column) IS DISTINCT FROM v_keys[1] THEN
            v_keys := v_keys || (to_jsonb(OLD) ->> v_key_column);
        END IF;
    END IF;
{_pg_bump_epoch("v_scope", _SOURCE_REGISTERED)}
    FOREACH v_key IN ARRAY v_keys LOOP
        INSERT INTO _emdash_media_usage_work ({_WORK_COLUMNS})
        VALUES (v_collection_id, v_scope, v_key, v_epoch, 1, 'pending', 0, v_now,
            NULL, NULL, NULL, NULL, v_now, v_now){_WORK_CONFLICT};
    END LOOP;
    RETURN NULL;
END
$capture$
"""


def _checked_source(source: HostSource) -> HostSource:
    source.validated()
    if not (
        _SAFE_SOURCE_ID.fullmatch(source.collection_id)
        and _SAFE_SCOPE_KEY.fullmatch(source.scope_key)
    ):
        raise UnsafeIdentity(f"Source {source.table!r} has no safe identity.")
    return source


def _sqlite_source_trigger(
    name: str, event: str, source: HostSource, quote: Callable[[str], str]
) -> str:
    cid, scope = source.collection_id, source.scope_key
    key = quote(source.key_column)
    status_row = f"""adapter_id = 'content-media' AND scope_type = 'collection'
            AND scope_key = '{scope}' AND collection_id = '{cid}' AND capture_state = 'active'"""

    def enqueue(row_key: str, when: str = "") -> str:
        return f"""
    INSERT INTO _emdash_media_usage_work ({_WORK_COLUMNS})
    SELECT '{cid}', '{scope}', {row_key}, change_epoch, 1, 'pending', 0, {_SQLITE_NOW},
        NULL, NULL, NULL, NULL, {_SQLITE_NOW}, {_SQLITE_NOW}
    FROM _emdash_media_usage_index_status WHERE {status_row}{when}{_WORK_CONFLICT};"""

    registered = f"""EXISTS (SELECT 1 FROM _media_usage_worker_sources
                    WHERE collection_id = '{cid}' AND scope_key = '{scope}')"""
    if event == "INSERT":
        writes = enqueue(f"NEW.{key}")
    elif event == "DELETE":
        writes = enqueue(f"OLD.{key}")
    else:
        writes = enqueue(f"NEW.{key}") + enqueue(f"OLD.{key}", f" AND OLD.{key} IS NOT NEW.{key}")
    return f"""CREATE TRIGGER {name} AFTER {_source_event(event, source, quote)}
    ON {quote(source.table)} FOR EACH ROW
BEGIN
{_sqlite_bump_epoch(status_row, registered)}{writes}
END"""


def _source_event(event: str, source: HostSource, quote: Callable[[str], str]) -> str:
    if event != "UPDATE":
        return event
    read = [source.key_column, *(name for name, _ in source.columns)]
    return "UPDATE OF " + ", ".join(quote(name) for name in read)


def install_source(conn: sa.Connection, source: HostSource) -> None:
    """(Re)create a source table's three capture triggers; drop any other ``emdash_mu_``
    trigger on it."""
    source = _checked_source(source)
    quote = conn.dialect.identifier_preparer.quote
    postgres = conn.dialect.name == "postgresql"
    _drop_owned_on(conn, source.table)
    if postgres:
        conn.exec_driver_sql(POSTGRES_SOURCE_FUNCTION_SQL)
    names = trigger_names(source.collection_id, source.scope_key)
    for suffix, event, _ in EVENTS:
        if postgres:
            ddl = (
                f"CREATE TRIGGER {names[suffix]} AFTER {_source_event(event, source, quote)} "
                f"ON {quote(source.table)} FOR EACH ROW EXECUTE FUNCTION "
                f"{POSTGRES_SOURCE_FUNCTION}('{source.collection_id}', '{source.scope_key}', "
                f"'{source.key_column}')"
            )
        else:
            ddl = _sqlite_source_trigger(names[suffix], event, source, quote)
        conn.exec_driver_sql(ddl)


def remove_source(conn: sa.Connection, source: HostSource) -> None:
    """Drop every capture trigger on a source's table."""
    _drop_owned_on(conn, _checked_source(source).table)


# --- revisions (drafts and live revisions edited in place) ------------------------------------
# An entry's draft (and its live revision) lives in ``revisions``; a host may write it without
# touching the entry's row. Every write to a revision is captured as a write to its entry
# (``collection`` is the entry's collection slug, ``entry_id`` its id), while that collection
# is registered with active capture; a revision of anything else is left alone, never refused.
# An update that moves a revision to another entry captures both entries.

REVISIONS_TABLE = "revisions"
POSTGRES_REVISION_FUNCTION = "emdash_media_usage_capture_revision_work"
REVISION_TRIGGERS = {suffix: f"{TRIGGER_PREFIX}revisions_{suffix}" for suffix, _, _ in EVENTS}


def _revision_scope(s: str) -> str:
    """The active, registered collection scope rows, with ``s`` naming the status table."""
    return f"""{s}.adapter_id = 'content-media' AND {s}.scope_type = 'collection'
        AND {s}.capture_state = 'active'
        AND EXISTS (SELECT 1 FROM _emdash_collections AS c
                    WHERE c.id = {s}.collection_id AND c.slug = {s}.scope_key)"""


_REVISION_SCOPE = _revision_scope("s")

POSTGRES_REVISION_FUNCTION_SQL = f"""
CREATE OR REPLACE FUNCTION {POSTGRES_REVISION_FUNCTION}() RETURNS trigger
LANGUAGE plpgsql AS $capture$
DECLARE
    v_slugs text[];
    v_entries text[];
    v_epoch bigint;
    v_collection_id text;
    v_now text := to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
BEGIN
    IF TG_OP = 'INSERT' THEN
        v_slugs := ARRAY[NEW.collection]; v_entries := ARRAY[NEW.entry_id];
    ELSIF TG_OP = 'DELETE' THEN
        v_slugs := ARRAY[OLD.collection]; v_entries := ARRAY[OLD.entry_id];
    ELSIF OLD.collection IS DISTINCT FROM NEW.collection
            OR OLD.entry_id IS DISTINCT FROM NEW.entry_id THEN
        v_slugs := ARRAY[NEW.collection, OLD.collection];
        v_entries := ARRAY[NEW.entry_id, OLD.entry_id];
    ELSE
        v_slugs := ARRAY[NEW.collection]; v_entries := ARRAY[NEW.entry_id];
    END IF;
    FOR i IN 1 .. array_length(v_slugs, 1) LOOP
        CONTINUE WHEN v_slugs[i] IS NULL OR v_entries[i] IS NULL;
        UPDATE _emdash_media_usage_index_status AS s SET
            change_epoch = s.change_epoch + 1,
            status = CASE WHEN s.status = 'complete' THEN 'stale' ELSE s.status END,
            completed_at = CASE WHEN s.status = 'complete' THEN NULL ELSE s.completed_at END,
            updated_at = v_now
        WHERE s.scope_key = v_slugs[i] AND {_REVISION_SCOPE}
        RETURNING s.change_epoch, s.collection_id INTO v_epoch, v_collection_id;
        CONTINUE WHEN NOT FOUND;
        INSERT INTO _emdash_media_usage_work ({_WORK_COLUMNS})
        VALUES (v_collection_id, v_slugs[i], v_entries[i], v_epoch, 1, 'pending', 0, v_now,
            NULL, NULL, NULL, NULL, v_now, v_now){_WORK_CONFLICT};
    END LOOP;
    RETURN NULL;
END
$capture$
"""


def _sqlite_revision_trigger(name: str, event: str) -> str:
    # SQLite allows no alias on the table a trigger's UPDATE writes: it is named in full.
    table = "_emdash_media_usage_index_status"

    def capture(row: str, when: str = "") -> str:
        scope = f"s.scope_key = {row}.collection AND {_REVISION_SCOPE}"
        written = f"{table}.scope_key = {row}.collection AND {_revision_scope(table)}"
        return f"""
    UPDATE {table} SET
        change_epoch = change_epoch + 1,
        status = CASE WHEN status = 'complete' THEN 'stale' ELSE status END,
        completed_at = CASE WHEN status = 'complete' THEN NULL ELSE completed_at END,
        updated_at = {_SQLITE_NOW}
    WHERE {written} AND {row}.entry_id IS NOT NULL{when};
    INSERT INTO _emdash_media_usage_work ({_WORK_COLUMNS})
    SELECT s.collection_id, s.scope_key, {row}.entry_id, s.change_epoch, 1, 'pending', 0,
        {_SQLITE_NOW}, NULL, NULL, NULL, NULL, {_SQLITE_NOW}, {_SQLITE_NOW}
    FROM _emdash_media_usage_index_status AS s
    WHERE {scope} AND {row}.entry_id IS NOT NULL{when}{_WORK_CONFLICT};"""

    if event == "INSERT":
        body = capture("NEW")
    elif event == "DELETE":
        body = capture("OLD")
    else:
        moved = " AND (OLD.collection IS NOT NEW.collection OR OLD.entry_id IS NOT NEW.entry_id)"
        body = capture("NEW") + capture("OLD", moved)
    return (
        f"CREATE TRIGGER {name} AFTER {event} ON {REVISIONS_TABLE} FOR EACH ROW\nBEGIN{body}\nEND"
    )


def install_revisions(conn: sa.Connection) -> None:
    """(Re)create the capture triggers of ``revisions``, where the table exists."""
    if not sa.inspect(conn).has_table(REVISIONS_TABLE):
        return
    remove_revisions(conn)
    postgres = conn.dialect.name == "postgresql"
    if postgres:
        conn.exec_driver_sql(POSTGRES_REVISION_FUNCTION_SQL)
    for suffix, event, _ in EVENTS:
        name = REVISION_TRIGGERS[suffix]
        conn.exec_driver_sql(
            f"CREATE TRIGGER {name} AFTER {event} ON {REVISIONS_TABLE} FOR EACH ROW "
            f"EXECUTE FUNCTION {POSTGRES_REVISION_FUNCTION}()"
            if postgres
            else _sqlite_revision_trigger(name, event)
        )


def remove_revisions(conn: sa.Connection) -> None:
    """Drop every capture trigger on ``revisions``."""
    if sa.inspect(conn).has_table(REVISIONS_TABLE):
        _drop_owned_on(conn, REVISIONS_TABLE)
