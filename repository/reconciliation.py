"""Reconciliation (facts sheet §12): bring a collection's coverage back to ``complete``.

One coordinator row per collection that needs it. Each step runs under the coordinator's lease
and does a bounded amount of work: the scan phase enqueues the collection's content ids (50 a
page, up to the id that was largest when the scan began) as work at the run's epoch; once that
work has drained, the sources phase enqueues entries whose content is gone; when that work has
drained too and the epoch has not moved, coverage is finalised to ``complete``. Any write to the
collection moves the epoch, which restarts the run; it converges once writes stop.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain import policy
from media_usage_worker.domain import validation as check
from media_usage_worker.domain.extraction import extraction_fields
from media_usage_worker.domain.snapshots import DISPLAY_FIELDS
from repository.activation import is_activation_active
from repository.clock import db_now, is_due, is_live_by_text
from repository.collections import load_fields
from repository.content_tables import content_columns
from repository.identity import registered, status_row
from repository.ids import new_ulid
from repository.schema import (
    ADAPTER_ID,
    SCOPE_TYPE,
    collection_deletions,
    index_status,
    reconciliations,
    sources,
    work,
)
from repository.work import MediaUsageWorkRepository

log = logging.getLogger(__name__)
PAGE = 50
LEASE_SECONDS = 60
RECONCILIATION_FAILED = "MEDIA_USAGE_RECONCILIATION_FAILED"
ENTRY_FAILED = "MEDIA_USAGE_RECONCILIATION_ENTRY_FAILED"

r = reconciliations.c
st = index_status.c


@dataclass(frozen=True)
class StepReport:
    collection_slug: str
    phase: str
    action: str  # started, enqueued, waiting, sources, completed, restarted, failed, deferred
    enqueued: int = 0


def field_fingerprint(conn: sa.Connection, collection_id: str) -> str:
    fields = load_fields(conn, collection_id)
    payload = {
        "fingerprintVersion": 1,
        "contentSourceSchemaVersion": 1,
        "extractionFields": [f.schema() for f in extraction_fields(fields)],
        "displayFieldSlugs": sorted(n for n in DISPLAY_FIELDS if any(f.slug == n for f in fields)),
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "media-usage-fields:v1:sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _status_of(row: Any) -> list[sa.ColumnElement[bool]]:
    return status_row(row.collection_id, row.collection_slug)


def _owns_run(row: Any, epoch: Any) -> list[sa.ColumnElement[bool]]:
    """The status row still belongs to this run at this epoch."""
    return [
        *_status_of(row),
        st.capture_state == "active",
        st.reconciliation_required == 1,
        st.status == "running",
        st.cursor == row.run_token,
        st.change_epoch == epoch,
    ]


class Reconciler:
    """All SQL of the coordinator table; ``tick`` is one bounded round of work."""

    def __init__(self, engine: sa.Engine, *, defer_seconds: int = 5) -> None:
        self.engine = engine
        self.work = MediaUsageWorkRepository(engine)
        self.defer_seconds = defer_seconds

    # --- one round -------------------------------------------------------------------------

    def tick(self, max_steps: int = 100, budget_seconds: float = 5.0) -> list[StepReport]:
        """Up to ``max_steps`` pages (or ``budget_seconds``) of work across due collections."""
        deadline = time.monotonic() + budget_seconds
        with self.engine.begin() as conn:
            if not is_activation_active(conn):
                return []
            # Coordinators whose collection no longer needs reconciling are done.
            conn.execute(
                reconciliations.delete().where(
                    sa.exists(sa.select(1).where(*_status_of(r), st.reconciliation_required == 0))
                )
            )
        self._reopen_failed_after_new_writes()
        self._seed()
        reports: list[StepReport] = []
        while len(reports) < max_steps and time.monotonic() < deadline:
            candidates = self._due_candidates(4)
            if not candidates:
                break
            for collection_id in candidates:
                row = self._claim(collection_id)
                if row is None:
                    continue
                try:
                    reports.append(self._step(row))
                except Exception:
                    log.exception("reconciliation step for %s failed", row.collection_slug)
                    self._record_failure(row, RECONCILIATION_FAILED)
                    reports.append(StepReport(row.collection_slug, row.phase, "failed"))
        return reports

    def _seed(self) -> None:
        needing = (
            sa.select(st.collection_id, st.scope_key)
            .where(
                st.adapter_id == ADAPTER_ID,
                st.scope_type == SCOPE_TYPE,
                st.capture_state == "active",
                st.reconciliation_required == 1,
                registered(st.collection_id, st.scope_key),
                ~sa.exists(sa.select(1).where(r.collection_id == st.collection_id)),
                ~sa.exists(
                    sa.select(1).where(collection_deletions.c.collection_id == st.collection_id)
                ),
            )
            .order_by(st.collection_id)
        )
        with self.engine.begin() as conn:
            for collection_id, slug in conn.execute(needing).all():
                conn.execute(
                    reconciliations.insert().values(
                        collection_id=collection_id,
                        collection_slug=slug,
                        run_token=new_ulid(),
                        next_attempt_at=db_now(),
                        created_at=db_now(),
                        updated_at=db_now(),
                    )
                )

    def _reopen_failed_after_new_writes(self) -> None:
        """A failed run is retried once the collection was written again (epoch moved on)."""
        moved_on = sa.exists(
            sa.select(1).where(
                *_status_of(r), st.cursor.is_(None), st.change_epoch > r.target_epoch
            )
        )
        with self.engine.begin() as conn:
            conn.execute(
                reconciliations.update()
                .where(r.state == "failed", moved_on)
                .values(
                    state="pending", phase="scan", run_token=new_ulid(), target_epoch=None,
                    field_fingerprint=None, scan_cursor=None, scan_upper_id=None,
                    source_cursor=None, source_upper_key=None, attempt_count=0,
                    next_attempt_at=db_now(), last_error_code=None, updated_at=db_now(),
                )
            )  # fmt: skip

    def _due_candidates(self, limit: int) -> list[str]:
        query = (
            sa.select(r.collection_id)
            .where(
                sa.or_(
                    sa.and_(r.state.in_(("pending", "retry")), is_due(r.next_attempt_at)),
                    sa.and_(r.state == "leased", is_due(r.lease_expires_at)),
                )
            )
            .order_by(r.next_attempt_at, r.updated_at, r.collection_id)
            .limit(limit)
        )
        with self.engine.begin() as conn:
            return list(conn.execute(query).scalars())

    def _claim(self, collection_id: str) -> Any:
        token = new_ulid()
        with self.engine.begin() as conn:
            return conn.execute(
                reconciliations.update()
                .where(
                    r.collection_id == collection_id,
                    sa.or_(
                        sa.and_(r.state.in_(("pending", "retry")), is_due(r.next_attempt_at)),
                        sa.and_(r.state == "leased", is_due(r.lease_expires_at)),
                    ),
                )
                .values(
                    state="leased",
                    lease_token=token,
                    lease_expires_at=db_now(LEASE_SECONDS),
                    updated_at=db_now(),
                )
                .returning(*reconciliations.c)
            ).first()

    # --- steps -------------------------------------------------------------------------------

    def _held(self, row: Any) -> list[sa.ColumnElement[bool]]:
        return [
            r.collection_id == row.collection_id,
            r.lease_token == row.lease_token,
            r.state == "leased",
            is_live_by_text(r.lease_expires_at),
        ]

    def _update(self, row: Any, **values: Any) -> bool:
        with self.engine.begin() as conn:
            return self._update_in(conn, row, **values)

    def _update_in(self, conn: sa.Connection, row: Any, **values: Any) -> bool:
        """The held coordinator row's guarded update, inside the caller's transaction."""
        return (
            conn.execute(
                reconciliations.update()
                .where(*self._held(row))
                .values(**values, updated_at=db_now())
                .returning(r.collection_id)
            ).first()
            is not None
        )

    def _release(self, row: Any, delay: int = 0, **values: Any) -> None:
        self._update(
            row, state="pending", lease_token=None, lease_expires_at=None,
            next_attempt_at=db_now(delay), **values,
        )  # fmt: skip

    def _step(self, row: Any) -> StepReport:
        if row.target_epoch is not None and not self._status_owned(row):
            return self._start(row, restarted=True)
        if row.target_epoch is None:
            return self._start(row, restarted=False)
        with self.engine.begin() as conn:
            fingerprint = field_fingerprint(conn, row.collection_id)
        if fingerprint != row.field_fingerprint:
            return self._start(row, restarted=True)
        if row.phase == "scan":
            return self._scan(row)
        return self._sources(row)

    def _status_owned(self, row: Any) -> bool:
        with self.engine.begin() as conn:
            return (
                conn.execute(sa.select(1).where(*_owns_run(row, row.target_epoch))).first()
                is not None
            )

    def _start(self, row: Any, *, restarted: bool) -> StepReport:
        """Begin (or restart) a run: bump the epoch, take the status row, fix the scan range."""
        with self.engine.begin() as conn:
            epoch = conn.execute(
                index_status.update()
                .where(
                    *_status_of(row),
                    st.capture_state == "active",
                    st.reconciliation_required == 1,
                    sa.or_(st.status != "running", st.cursor == row.run_token, st.cursor.is_(None)),
                    registered(row.collection_id, row.collection_slug),
                )
                .values(
                    status="running", started_at=db_now(), completed_at=None,
                    cursor=row.run_token, indexed_source_count=0, failed_source_count=0,
                    last_error_code=None, change_epoch=st.change_epoch + 1,
                    reconciliation_required=1, updated_at=db_now(),
                )
                .returning(st.change_epoch)
            ).scalar_one_or_none()  # fmt: skip
            if epoch is None:
                self._release(row, self.defer_seconds)
                return StepReport(row.collection_slug, row.phase, "deferred")
            fingerprint = field_fingerprint(conn, row.collection_id)
            content = content_columns(row.collection_slug)
            upper = conn.execute(sa.select(sa.func.max(content.c.id))).scalar_one_or_none()
        self._release(
            row, 0, target_epoch=epoch, field_fingerprint=fingerprint, phase="scan",
            scan_cursor=None, scan_upper_id=upper, source_cursor=None, source_upper_key=None,
        )  # fmt: skip
        return StepReport(row.collection_slug, "scan", "restarted" if restarted else "started")

    def _enqueue(self, row: Any, phase: str, ids: list[str]) -> None:
        self.work.enqueue_reconciliation_page(
            collection_id=row.collection_id, collection_slug=row.collection_slug,
            run_token=row.run_token, lease_token=row.lease_token,
            change_epoch=row.target_epoch, phase=phase, content_ids=ids,
        )  # fmt: skip

    def _scan(self, row: Any) -> StepReport:
        content = content_columns(row.collection_slug)
        ids: list[str] = []
        if row.scan_upper_id is not None:
            query = sa.select(content.c.id).where(content.c.id <= row.scan_upper_id)
            if row.scan_cursor is not None:
                query = query.where(content.c.id > row.scan_cursor)
            with self.engine.begin() as conn:
                ids = list(conn.execute(query.order_by(content.c.id).limit(PAGE)).scalars())
        if ids:
            usable, unusable = check.split_usable(ids, lambda content_id: content_id)
            if usable:
                self._enqueue(row, "scan", usable)
            for content_id in unusable:
                self.work.record_unusable_content(
                    collection_id=row.collection_id, collection_slug=row.collection_slug,
                    content_id=content_id, change_epoch=row.target_epoch,
                    error_code=policy.UNUSABLE_CONTENT_ID,
                )  # fmt: skip
            self._release(row, 0, scan_cursor=ids[-1])
            return StepReport(row.collection_slug, "scan", "enqueued", len(ids))
        barrier = self._work_barrier(row)
        if barrier is not None:
            return barrier
        s = sources.c
        with self.engine.begin() as conn:
            upper = conn.execute(
                sa.select(sa.func.max(s.source_key)).where(
                    s.source_type == "content",
                    s.collection_id == row.collection_id,
                    s.identity_version == 1,
                )
            ).scalar_one_or_none()
        self._release(row, 0, phase="sources", source_cursor=None, source_upper_key=upper)
        return StepReport(row.collection_slug, "sources", "sources")

    def _sources(self, row: Any) -> StepReport:
        s = sources.c
        keys: list[tuple[str, str]] = []
        if row.source_upper_key is not None:
            query = sa.select(s.source_key, s.content_id).where(
                s.source_type == "content",
                s.collection_id == row.collection_id,
                s.identity_version == 1,
                s.source_key <= row.source_upper_key,
            )
            if row.source_cursor is not None:
                query = query.where(s.source_key > row.source_cursor)
            with self.engine.begin() as conn:
                keys = [tuple(k) for k in conn.execute(query.order_by(s.source_key).limit(PAGE))]
        if keys:
            content = content_columns(row.collection_slug)
            candidates = list(dict.fromkeys(content_id for _, content_id in keys))
            with self.engine.begin() as conn:
                present = set(
                    conn.execute(
                        sa.select(content.c.id).where(content.c.id.in_(candidates))
                    ).scalars()
                )
            gone = [c for c in candidates if c not in present]
            if gone:
                self._enqueue(row, "sources", gone)
            self._release(row, 0, source_cursor=keys[-1][0])
            return StepReport(row.collection_slug, "sources", "enqueued", len(gone))
        barrier = self._work_barrier(row)
        if barrier is not None:
            return barrier
        return self._finalize(row)

    def _work_barrier(self, row: Any) -> StepReport | None:
        """Wait for the run's work to drain; then a failed item fails the run.

        The run waits for the other items first, so its coverage says how much was indexed
        (``partial``) instead of ``failed`` while entries were still being processed.
        """
        w = work.c
        with self.engine.begin() as conn:
            states = set(
                conn.execute(
                    sa.select(w.state).distinct().where(w.collection_id == row.collection_id)
                ).scalars()
            )
        if states - {"failed"}:
            self._release(row, self.defer_seconds)
            return StepReport(row.collection_slug, row.phase, "waiting")
        if states:
            self._record_failure(row, ENTRY_FAILED, terminal=True)
            return StepReport(row.collection_slug, row.phase, "failed")
        return None

    def _finalize(self, row: Any) -> StepReport:
        held = sa.exists(sa.select(1).where(*self._held(row), r.phase == "sources"))
        with self.engine.begin() as conn:
            done = conn.execute(
                index_status.update()
                .where(
                    *_owns_run(row, row.target_epoch),
                    ~sa.exists(sa.select(1).where(work.c.collection_id == row.collection_id)),
                    held,
                    registered(row.collection_id, row.collection_slug),
                    ~sa.exists(
                        sa.select(1).where(
                            collection_deletions.c.collection_id == row.collection_id
                        )
                    ),
                )
                .values(
                    status="complete", schema_version=1, completed_at=db_now(), cursor=None,
                    last_error_code=None, reconciliation_required=0, updated_at=db_now(),
                )
                .returning(st.scope_key)
            ).first()  # fmt: skip
            if done is not None:
                conn.execute(
                    reconciliations.delete().where(
                        r.collection_id == row.collection_id, r.lease_token == row.lease_token
                    )
                )
                return StepReport(row.collection_slug, "sources", "completed")
        return self._start(row, restarted=True)

    # --- failure -------------------------------------------------------------------------------

    def _record_failure(self, row: Any, code: str, *, terminal: bool = False) -> None:
        terminal = terminal or policy.is_terminal(code, row.attempt_count)
        if not terminal:
            delay = policy.retry_delay_seconds(row.attempt_count)
            self._update(
                row, state="retry", attempt_count=r.attempt_count + 1, lease_token=None,
                lease_expires_at=None, next_attempt_at=db_now(delay), last_error_code=code,
            )  # fmt: skip
            return
        # One transaction: a worker killed between the coordinator's "failed" and the coverage
        # row would leave coverage "running" with this run's cursor, which nothing reopens.
        with self.engine.begin() as conn:
            if self._update_in(
                conn, row, state="failed", attempt_count=r.attempt_count + 1, lease_token=None,
                lease_expires_at=None, last_error_code=code,
            ):  # fmt: skip
                self._finish_failed_coverage(conn, row, code)

    def _finish_failed_coverage(self, conn: sa.Connection, row: Any, code: str) -> None:
        s, w = sources.c, work.c
        if code == ENTRY_FAILED:
            first_failed = conn.execute(
                sa.select(w.last_error_code)
                .where(w.collection_id == row.collection_id, w.state == "failed")
                .order_by(w.content_id)
                .limit(1)
            ).scalar_one_or_none()
            code = first_failed or code
        has_sources = sa.exists(
            sa.select(1).where(
                s.source_type == "content",
                s.collection_id == row.collection_id,
                s.identity_version == 1,
            )
        )
        conn.execute(
            index_status.update()
            .where(*_status_of(row), st.status == "running", st.cursor == row.run_token)
            .values(
                status=sa.case((has_sources, "partial"), else_="failed"),
                completed_at=None, cursor=None, last_error_code=code,
                reconciliation_required=1, updated_at=db_now(),
            )
        )  # fmt: skip
