"""The rules each collection's index was computed under (docs/design.md §5, "Rules").

``complete`` coverage holds only while a collection's index was computed under the running
rules (``domain.rules``). A run that makes coverage ``complete`` records its rules in the same
transaction (``record_indexed_rules``); ``mark_rules_changed`` takes every collection indexed
under other rules out of ``complete`` in one guarded statement, and reconciliation re-indexes
it; ``rules_current`` is the guard that keeps a worker of other rules from restoring it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.rules import EXTRACTION_VERSION, RulesState
from media_usage_worker.domain.vocabulary import CaptureState, CoverageStatus, ErrorCode
from repository.clock import db_now
from repository.db import Bind, transaction
from repository.schema import ADAPTER_ID, SCOPE_TYPE, index_status, rules_state
from repository.upsert import insert_factory_for

r = rules_state.c
st = index_status.c


def rules_current(collection_id: Any) -> sa.Exists:
    """True while the collection's index was computed under this code's rules."""
    return sa.exists(
        sa.select(1).where(
            r.collection_id == collection_id,
            r.indexed_extraction_version == EXTRACTION_VERSION,
            r.indexed_rules_revision == r.rules_revision,
        )
    )


def record_indexed_rules(conn: sa.Connection, collection_id: str) -> None:
    """The collection is indexed under the running rules: call in the transaction that makes
    its coverage ``complete`` (that transaction's guards hold the rules still: a change to
    the declared rules moves the collection's epoch)."""
    insert = insert_factory_for(conn.dialect.name)(rules_state).values(
        collection_id=collection_id,
        indexed_extraction_version=EXTRACTION_VERSION,
        indexed_rules_revision=0,
        updated_at=db_now(),
    )
    conn.execute(
        insert.on_conflict_do_update(
            index_elements=[r.collection_id],
            set_={
                "indexed_extraction_version": EXTRACTION_VERSION,
                "indexed_rules_revision": r.rules_revision,
                "updated_at": db_now(),
            },
        )
    )


# Coverage that a collection could keep or get back without a run, while its index was
# computed under other rules: it becomes ``stale`` and needs reconciling. A run in progress is
# left alone (its fingerprint restarts it under the running rules).
_MARK_RULES_CHANGED = (
    index_status.update()
    .where(
        st.adapter_id == ADAPTER_ID,
        st.scope_type == SCOPE_TYPE,
        st.capture_state == CaptureState.ACTIVE,
        st.reconciliation_required == 0,
        st.status.in_((CoverageStatus.COMPLETE, CoverageStatus.STALE, CoverageStatus.PARTIAL)),
        ~rules_current(st.collection_id),
    )
    .values(
        status=CoverageStatus.STALE,
        completed_at=None,
        last_error_code=ErrorCode.RULES_CHANGED,
        reconciliation_required=1,
        updated_at=db_now(),
    )
    .returning(st.scope_key)
)


def mark_rules_changed(bind: Bind) -> list[str]:
    """Take every collection indexed under other rules out of ``complete``; their slugs."""
    with transaction(bind) as conn:
        return sorted(conn.execute(_MARK_RULES_CHANGED).scalars())


def read_rules_states(conn: sa.Connection) -> dict[str, RulesState]:
    """Every collection's rules state by collection id (none recorded: ``RulesState()``)."""
    rows = conn.execute(
        sa.select(
            r.collection_id, r.rules_revision, r.indexed_extraction_version,
            r.indexed_rules_revision,
        )
    )  # fmt: skip
    return {row[0]: RulesState(*row[1:]) for row in rows}
