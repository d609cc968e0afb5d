"""A test-only audit trail, fed by triggers, of every claim, completion and index write.

Each index write (insert, update or delete of a source row) records the item's work row as it
was at that instant: its state, lease token, version and expiry; and the leased key range of a
reconciliation that holds the entry then, if any (its lease token and expiry). A write is
*stale* unless the work row was ``leased`` under a token that a recorded claim issued for that
very version and the lease had not run out, or the range was leased under a token a recorded
range claim issued and its lease had not run out. Completions (a leased work row deleted) are
checked the way work-row writes are.
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
    range_token TEXT,
    range_expires_at TEXT,
    at TEXT NOT NULL
)"""
# The work row of the source's item, as the writing transaction sees it.
ROW_OF = """(SELECT {col} FROM _emdash_media_usage_work AS w
   WHERE w.collection_id = {rec}.collection_id AND w.content_id = {rec}.content_id)"""
# The leased key range that holds the source's entry, as the writing transaction sees it.
RANGE_OF = """(SELECT {col} FROM _media_usage_worker_backfill_ranges AS r
   WHERE r.collection_id = {rec}.collection_id AND r.state = 'leased'
     AND (r.after_key IS NULL OR r.after_key < {rec}.content_id)
     AND r.last_key >= {rec}.content_id LIMIT 1)"""
RANGE_CLAIM = """INSERT INTO chaos_audit (kind, collection_id, lease_token, lease_expires_at, at)
   VALUES ('range_claim', NEW.collection_id, NEW.lease_token, NEW.lease_expires_at, {now})"""

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
                               lease_token, lease_expires_at, range_token, range_expires_at,
                               at)
      VALUES ('write', rec.collection_id, rec.content_id,
              {ROW_OF.format(col="work_version", rec="rec")},
              {ROW_OF.format(col="state", rec="rec")},
              {ROW_OF.format(col="lease_token", rec="rec")},
              {ROW_OF.format(col="lease_expires_at", rec="rec")},
              {RANGE_OF.format(col="lease_token", rec="rec")},
              {RANGE_OF.format(col="lease_expires_at", rec="rec")}, {PG_NOW});
      RETURN NULL;
    END $$""",
    """CREATE TRIGGER chaos_audit_sources AFTER INSERT OR UPDATE OR DELETE
       ON _emdash_media_usage_sources FOR EACH ROW EXECUTE FUNCTION chaos_audit_write()""",
    f"""CREATE FUNCTION chaos_audit_range_claim() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      {RANGE_CLAIM.format(now=PG_NOW)};
      RETURN NULL;
    END $$""",
    """CREATE TRIGGER chaos_audit_ranges AFTER UPDATE ON _media_usage_worker_backfill_ranges
       FOR EACH ROW WHEN (NEW.state = 'leased'
                          AND NEW.lease_token IS DISTINCT FROM OLD.lease_token)
       EXECUTE FUNCTION chaos_audit_range_claim()""",
]


def _sqlite_write(event: str, rec: str) -> str:
    cols = ", ".join(
        [ROW_OF.format(col=c, rec=rec)
         for c in ("work_version", "state", "lease_token", "lease_expires_at")]
        + [RANGE_OF.format(col=c, rec=rec) for c in ("lease_token", "lease_expires_at")]
    )  # fmt: skip
    return f"""CREATE TRIGGER chaos_audit_sources_{event.lower()} AFTER {event}
       ON _emdash_media_usage_sources BEGIN
         INSERT INTO chaos_audit (kind, collection_id, content_id, work_version, state,
                                  lease_token, lease_expires_at, range_token,
                                  range_expires_at, at)
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
    f"""CREATE TRIGGER chaos_audit_ranges AFTER UPDATE ON _media_usage_worker_backfill_ranges
       WHEN NEW.state = 'leased' AND NEW.lease_token IS NOT OLD.lease_token BEGIN
         {RANGE_CLAIM.format(now=SQLITE_NOW)};
       END""",
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
                "lease_expires_at, range_token, range_expires_at, at FROM chaos_audit "
                "ORDER BY id"
            )
        ).all()
    issued = {(r.lease_token, r.collection_id, r.content_id, r.work_version)
              for r in rows if r.kind == "claim"}  # fmt: skip
    ranges_issued = {(r.lease_token, r.collection_id) for r in rows if r.kind == "range_claim"}

    def live(at: str, expires: str | None) -> bool:
        return expires is not None and _ms(at) < _ms(expires) + tolerance_ms

    stale = []
    for r in rows:
        if r.kind in ("claim", "range_claim"):
            continue
        claimed = (r.lease_token, r.collection_id, r.content_id, r.work_version) in issued
        by_item = r.state == "leased" and claimed and live(r.at, r.lease_expires_at)
        by_range = (
            r.kind == "write"
            and (r.range_token, r.collection_id) in ranges_issued
            and live(r.at, r.range_expires_at)
        )
        if not by_item and not by_range:
            stale.append(tuple(r))
    return AuditReport(
        claims=sum(r.kind in ("claim", "range_claim") for r in rows),
        completions=sum(r.kind == "complete" for r in rows),
        writes=sum(r.kind == "write" for r in rows),
        stale=stale,
    )


def _ms(text: str) -> int:
    from datetime import datetime

    parsed = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
    return int(parsed.timestamp() * 1000)
