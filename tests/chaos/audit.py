"""A test-only audit trail, fed by triggers, of every claim, completion and index write.

Each index write (insert, update or delete of a source row) records the item's work row as it
was at that instant: its state, lease token, version and expiry. A write is *stale* unless the
row was ``leased`` under a token that a recorded claim issued for that very version, and the
lease had not run out. Completions (a leased work row deleted) are checked the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

PG_NOW = """to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')"""
SQLITE_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
TABLE = """CREATE TABLE chaos_audit (
    id {serial},
    kind TEXT NOT NULL,
    collection_id TEXT,
    content_id TEXT,
    work_version BIGINT,
    state TEXT,
    lease_token TEXT,
    lease_expires_at TEXT,
    at TEXT NOT NULL
)"""
# The work row of the source's item, as the writing transaction sees it.
ROW_OF = """(SELECT {col} FROM _emdash_media_usage_work AS w
   WHERE w.collection_id = {rec}.collection_id AND w.content_id = {rec}.content_id)"""

POSTGRES = [
    TABLE.format(serial="BIGSERIAL PRIMARY KEY"),
    f"""CREATE FUNCTION chaos_audit_claim() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'UPDATE' AND NEW.state = 'leased'
         AND NEW.lease_token IS DISTINCT FROM OLD.lease_token THEN
        INSERT INTO chaos_audit (kind, collection_id, content_id, work_version, state,
                                 lease_token, lease_expires_at, at)
        VALUES ('claim', NEW.collection_id, NEW.content_id, NEW.work_version, NEW.state,
                NEW.lease_token, NEW.lease_expires_at, {PG_NOW});
      ELSIF TG_OP = 'DELETE' AND OLD.state = 'leased' THEN
        INSERT INTO chaos_audit (kind, collection_id, content_id, work_version, state,
                                 lease_token, lease_expires_at, at)
        VALUES ('complete', OLD.collection_id, OLD.content_id, OLD.work_version, OLD.state,
                OLD.lease_token, OLD.lease_expires_at, {PG_NOW});
      END IF;
      RETURN NULL;
    END $$""",
    """CREATE TRIGGER chaos_audit_work AFTER UPDATE OR DELETE ON _emdash_media_usage_work
       FOR EACH ROW EXECUTE FUNCTION chaos_audit_claim()""",
    f"""CREATE FUNCTION chaos_audit_write() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE rec record;
    BEGIN
      IF TG_OP = 'DELETE' THEN rec := OLD; ELSE rec := NEW; END IF;
      INSERT INTO chaos_audit (kind, collection_id, content_id, work_version, state,
                               lease_token, lease_expires_at, at)
      VALUES ('write', rec.collection_id, rec.content_id,
              {ROW_OF.format(col="work_version", rec="rec")},
              {ROW_OF.format(col="state", rec="rec")},
              {ROW_OF.format(col="lease_token", rec="rec")},
              {ROW_OF.format(col="lease_expires_at", rec="rec")}, {PG_NOW});
      RETURN NULL;
    END $$""",
    """CREATE TRIGGER chaos_audit_sources AFTER INSERT OR UPDATE OR DELETE
       ON _emdash_media_usage_sources FOR EACH ROW EXECUTE FUNCTION chaos_audit_write()""",
]


def _sqlite_write(event: str, rec: str) -> str:
    cols = ", ".join(
        ROW_OF.format(col=c, rec=rec)
        for c in ("work_version", "state", "lease_token", "lease_expires_at")
    )
    return f"""CREATE TRIGGER chaos_audit_sources_{event.lower()} AFTER {event}
       ON _emdash_media_usage_sources BEGIN
         INSERT INTO chaos_audit (kind, collection_id, content_id, work_version, state,
                                  lease_token, lease_expires_at, at)
         VALUES ('write', {rec}.collection_id, {rec}.content_id, {cols}, {SQLITE_NOW});
       END"""


SQLITE = [
    TABLE.format(serial="INTEGER PRIMARY KEY AUTOINCREMENT"),
    f"""CREATE TRIGGER chaos_audit_claim AFTER UPDATE ON _emdash_media_usage_work
       WHEN NEW.state = 'leased' AND NEW.lease_token IS NOT OLD.lease_token BEGIN
         INSERT INTO chaos_audit (kind, collection_id, content_id, work_version, state,
                                  lease_token, lease_expires_at, at)
         VALUES ('claim', NEW.collection_id, NEW.content_id, NEW.work_version, NEW.state,
                 NEW.lease_token, NEW.lease_expires_at, {SQLITE_NOW});
       END""",
    f"""CREATE TRIGGER chaos_audit_complete AFTER DELETE ON _emdash_media_usage_work
       WHEN OLD.state = 'leased' BEGIN
         INSERT INTO chaos_audit (kind, collection_id, content_id, work_version, state,
                                  lease_token, lease_expires_at, at)
         VALUES ('complete', OLD.collection_id, OLD.content_id, OLD.work_version, OLD.state,
                 OLD.lease_token, OLD.lease_expires_at, {SQLITE_NOW});
       END""",
    _sqlite_write("INSERT", "NEW"),
    _sqlite_write("UPDATE", "NEW"),
    _sqlite_write("DELETE", "OLD"),
]


def install(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        for statement in POSTGRES if engine.dialect.name == "postgresql" else SQLITE:
            conn.exec_driver_sql(statement)


@dataclass(frozen=True)
class AuditReport:
    claims: int
    completions: int
    writes: int
    stale: list[tuple]


def check(engine: sa.Engine, tolerance_ms: int = 0) -> AuditReport:
    """Every completion and index write against the claim that issued its token.

    ``tolerance_ms`` allows for PostgreSQL's trigger reading the wall clock a moment after the
    statement's own lease check did.
    """
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT kind, collection_id, content_id, work_version, state, lease_token, "
                "lease_expires_at, at FROM chaos_audit ORDER BY id"
            )
        ).all()
    issued = {(r.lease_token, r.collection_id, r.content_id, r.work_version)
              for r in rows if r.kind == "claim"}  # fmt: skip
    stale = []
    for r in rows:
        if r.kind == "claim":
            continue
        claimed = (r.lease_token, r.collection_id, r.content_id, r.work_version) in issued
        live = r.lease_expires_at is not None and _ms(r.at) < _ms(r.lease_expires_at) + (
            tolerance_ms
        )
        if r.state != "leased" or not claimed or not live:
            stale.append(tuple(r))
    return AuditReport(
        claims=sum(r.kind == "claim" for r in rows),
        completions=sum(r.kind == "complete" for r in rows),
        writes=sum(r.kind == "write" for r in rows),
        stale=stale,
    )


def _ms(text: str) -> int:
    from datetime import datetime

    parsed = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
    return int(parsed.timestamp() * 1000)
