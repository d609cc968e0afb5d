"""Queued writes accounted for without waiting for them (docs/design.md §5, "Answers while
writes are queued").

On a site that keeps writing, some entry nearly always waits in the work table. Its index
rows may be behind, so "used nowhere" cannot be read from the index alone; but the queue is a
known, finite set. ``queued_uses`` reads those entries as they are now, in the caller's
transaction (behind the clean-up's fence no write can commit meanwhile), extracts their
references under the running rules and returns the media ids they name, writing nothing.
Every answer it cannot be sure of is ``None``: "not known yet".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import sqlalchemy as sa

from media_usage_worker.domain.errors import EntryTooLarge, FieldDiscoveryError, UnreadableValue
from media_usage_worker.domain.extraction import MediaUrls
from media_usage_worker.domain.policy import Limits
from media_usage_worker.domain.refresh_plan import (
    CollectionState,
    EntryWrite,
    StorageKeys,
    columns_to_read,
    plan_refresh,
)
from media_usage_worker.domain.vocabulary import CaptureState, CoverageStatus, WorkState
from media_usage_worker.repository.base.predicates import registered
from media_usage_worker.repository.base.schema import ADAPTER_ID, SCOPE_TYPE, index_status, work
from media_usage_worker.repository.index.projection import (
    media_ids_by_storage_keys_on,
    read_entries_on,
)
from media_usage_worker.repository.registry.host_sources import SCOPES, built_in_gaps
from media_usage_worker.repository.registry.rules import read_rules_states

# The longest queue accounted for: more waiting entries than this is a site falling behind,
# and the answer waits for the workers (reading them all behind the fence would hold writers).
MAX_PENDING = 1000
# Entries read per statement.
READ_CHUNK = 100

_st, _w = index_status.c, work.c

# A scope whose index is whole but for its queued writes: nothing to reconcile, the rules it
# was indexed under are the running ones, capture active, and ``complete`` or ``stale`` (a
# write made it so; ``partial`` and ``failed`` are entries that could not be indexed).
_BASELINE_MISSING = (
    sa.select(SCOPES.c.slug)
    .where(
        ~sa.exists(
            sa.select(1).where(
                _st.adapter_id == ADAPTER_ID,
                _st.scope_type == SCOPE_TYPE,
                _st.scope_key == SCOPES.c.slug,
                _st.collection_id == SCOPES.c.id,
                _st.status.in_((CoverageStatus.COMPLETE, CoverageStatus.STALE)),
                _st.reconciliation_required == 0,
                _st.schema_version == 1,
                _st.capture_state == CaptureState.ACTIVE,
            )
        ),
    )
    .limit(1)
)
_QUEUE = sa.select(_w.collection_id, _w.collection_slug, _w.content_id, _w.state).limit(
    MAX_PENDING + 1
)


def baseline_holds(conn: sa.Connection) -> bool:
    """Every collection and source is indexed whole under the running rules, except entries
    that have a work row."""
    if conn.execute(_BASELINE_MISSING).first() is not None or built_in_gaps(conn):
        return False
    # Indexed under the running rules, with the fields the registry has now (the CMS may
    # have changed them itself), every registered scope.
    states = read_rules_states(conn).values()
    return all(s.current for s in states if s.current_fields is not None)


def queued_uses(conn: sa.Connection) -> set[str] | None:
    """The media ids the queued entries name as they are now; ``None`` when the queue cannot
    be accounted for (a failed row, more than ``MAX_PENDING`` rows, an entry that cannot be
    read whole or is over the limits)."""
    rows = conn.execute(_QUEUE).all()
    if len(rows) > MAX_PENDING or any(row.state == WorkState.FAILED for row in rows):
        return None
    by_scope: dict[tuple[str, str], list[str]] = defaultdict(list)
    for row in rows:
        by_scope[(row.collection_id, row.collection_slug)].append(row.content_id)
    named: set[str] = set()
    for (collection_id, slug), content_ids in by_scope.items():
        for start in range(0, len(content_ids), READ_CHUNK):
            chunk = content_ids[start : start + READ_CHUNK]
            found = _named_by(conn, collection_id, slug, chunk)
            if found is None:
                return None
            named |= found
    return named


def _named_by(
    conn: sa.Connection, collection_id: str, slug: str, content_ids: Sequence[str]
) -> set[str] | None:
    if not conn.execute(sa.select(registered(collection_id, slug))).scalar_one():
        # The collection is gone (the CMS deleted it, table and all): its rows name nothing.
        return set()
    state = read_entries_on(conn, collection_id, slug, content_ids, columns_to_read)
    if not state.present:
        return set()
    keys = StorageKeys()
    plans = _plans(state, content_ids, keys)
    if plans is not None and keys.missing:
        keys.learn(media_ids_by_storage_keys_on(conn, keys.missing))
        plans = _plans(state, content_ids, keys)
    if plans is None:
        return None
    return {
        occurrence.media_id
        for plan in plans
        for snapshot, _ in (*plan.keep, *plan.replace)
        for occurrence in snapshot.occurrences
        if occurrence.media_id is not None
    }


def _plans(
    state: CollectionState, content_ids: Sequence[str], keys: StorageKeys
) -> list[EntryWrite] | None:
    urls = MediaUrls(state.media_url_prefixes, keys)
    plans = []
    for content_id in content_ids:
        try:
            plan = plan_refresh(state.entries[content_id], state.fields, Limits(), None, urls=urls)
        except (EntryTooLarge, FieldDiscoveryError, UnreadableValue):
            return None
        if not isinstance(plan, EntryWrite):
            return None
        plans.append(plan)
    return plans
