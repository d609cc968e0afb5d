"""Manual repair (facts sheet §10, §7.4 repair): rescan one collection synchronously.

The repair takes the collection's status row at its *current* epoch (without bumping it),
refreshes every entry and removes the sources of vanished ones, deletes the work that the rescan
made redundant (``delete_work_through_epoch``) and finalises only if the epoch is still the one
it started at. A write that lands during the repair moves the epoch, so the repair ends
``stale`` with ``CONTENT_USAGE_REPAIR_CONFLICT`` and that write's work stays queued: never
``complete`` over missing work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa

from media_usage_worker.domain.errors import CollectionNotFound, MediaUsageError
from media_usage_worker.domain.policy import UNUSABLE_CONTENT_ID, Limits
from media_usage_worker.domain.snapshots import ContentEntry
from media_usage_worker.domain.validation import split_usable
from repository.activation import is_activation_active
from repository.clock import db_now
from repository.collections import CollectionRegistry
from repository.content_tables import content_columns
from repository.identity import status_row
from repository.ids import new_ulid
from repository.refresh import refresh_entry
from repository.schema import index_status, sources, work
from repository.work import MediaUsageWorkRepository

REPAIR_CONFLICT = "CONTENT_USAGE_REPAIR_CONFLICT"
PAGE = 50
st = index_status.c


class RepairNotPossible(MediaUsageError):
    """Repair needs active capture on a registered collection with no run in progress."""


@dataclass(frozen=True)
class RepairResult:
    collection_slug: str
    status: str  # complete | partial | failed | stale
    indexed: int
    failed: int
    skipped: int
    removed: int
    error_code: str | None


def repair_collection(
    engine: sa.Engine,
    slug: str,
    *,
    limits: Limits | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> RepairResult:
    collection = CollectionRegistry(engine).get(slug)
    if collection is None:
        raise CollectionNotFound(f"No collection has slug {slug!r}.")
    run_token = new_ulid()
    own_status = status_row(collection.id, slug)
    with engine.begin() as conn:
        if not is_activation_active(conn):
            raise RepairNotPossible("Repair needs incremental capture to be activated first.")
        epoch = conn.execute(
            index_status.update()
            .where(*own_status, st.capture_state == "active")
            .values(
                status="running", schema_version=1, started_at=db_now(), completed_at=None,
                cursor=run_token, indexed_source_count=0, failed_source_count=0,
                last_error_code=None, reconciliation_required=1, updated_at=db_now(),
            )
            .returning(st.change_epoch)
        ).scalar_one_or_none()  # fmt: skip
        if epoch is None:
            raise RepairNotPossible(f"Capture is not active for collection {slug!r}.")
        content = content_columns(slug)
        total = conn.execute(sa.select(sa.func.count()).select_from(content)).scalar_one()

    indexed = failed = skipped = removed = 0
    unusable: list[str] = []  # ids the host stored that cannot be indexed (kept as failed work)
    first_error: str | None = None
    limits = limits or Limits()
    done = 0
    after: str | None = None
    while True:
        query = sa.select(content.c.id).order_by(content.c.id).limit(PAGE)
        if after is not None:
            query = query.where(content.c.id > after)
        with engine.begin() as conn:
            ids = list(conn.execute(query).scalars())
        if not ids:
            break
        usable, unusable_ids = split_usable(ids, lambda content_id: content_id)
        if unusable_ids:
            unusable += unusable_ids
            failed += len(unusable_ids)
            first_error = first_error or UNUSABLE_CONTENT_ID
        for content_id in usable:
            code = refresh_entry(engine, ContentEntry(collection.id, slug, content_id), limits)
            if code is None:
                indexed += 1
            elif code == "CONTENT_USAGE_GENERATION_CONFLICT":
                skipped += 1
            else:
                failed += 1
                first_error = first_error or code
        done += len(ids)
        after = ids[-1]
        if progress:
            progress(done, total)

    # Entries that vanished: their sources go (guarded: only while they stay gone).
    s = sources.c
    with engine.begin() as conn:
        orphan_ids = list(
            conn.execute(
                sa.select(s.content_id)
                .distinct()
                .where(
                    s.collection_id == collection.id,
                    s.identity_version == 1,
                    ~sa.exists(sa.select(1).where(content.c.id == s.content_id)),
                )
            ).scalars()
        )
    for content_id in orphan_ids:
        code = refresh_entry(engine, ContentEntry(collection.id, slug, content_id), limits)
        if code is None:
            removed += 1
        else:
            skipped += 1

    repo = MediaUsageWorkRepository(engine)
    repo.delete_work_through_epoch(collection.id, epoch)
    for content_id in unusable:
        repo.record_unusable_content(
            collection_id=collection.id, collection_slug=slug, content_id=content_id,
            change_epoch=epoch, error_code=UNUSABLE_CONTENT_ID,
        )  # fmt: skip
    outcome = "complete" if not failed and not skipped else ("failed" if not indexed else "partial")
    error = None if outcome == "complete" else (first_error or REPAIR_CONFLICT)
    with engine.begin() as conn:
        finalized = conn.execute(
            index_status.update()
            .where(
                *own_status,
                st.status == "running",
                st.cursor == run_token,
                st.change_epoch == epoch,
                # complete only when nothing is left to do at this epoch
                sa.or_(
                    sa.literal(outcome != "complete"),
                    ~sa.exists(sa.select(1).where(work.c.collection_id == collection.id)),
                ),
            )
            .values(
                status=outcome, completed_at=db_now(), cursor=None, indexed_source_count=indexed,
                failed_source_count=failed, last_error_code=error,
                reconciliation_required=0 if outcome == "complete" else 1, updated_at=db_now(),
            )
            .returning(st.status)
        ).first()  # fmt: skip
        if finalized is None:
            conn.execute(
                index_status.update()
                .where(*own_status, st.cursor == run_token)
                .values(
                    status="stale", completed_at=None, cursor=None,
                    last_error_code=REPAIR_CONFLICT, reconciliation_required=1,
                    updated_at=db_now(),
                )
            )  # fmt: skip
            outcome, error = "stale", REPAIR_CONFLICT
    return RepairResult(slug, outcome, indexed, failed, skipped, removed, error)
