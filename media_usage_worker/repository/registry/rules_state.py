"""Which extraction rules each scope's index was computed under (docs/design.md §5, "Rules"):
the record a finished index writes, and the guard that reads it. Below ``repository.rules``
(which changes the rules) so that whatever marks coverage ``complete`` can record them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.rules import EXTRACTION_VERSION
from media_usage_worker.repository.base.clock import db_now
from media_usage_worker.repository.base.schema import rules_state
from media_usage_worker.repository.base.upsert import insert_factory_for
from media_usage_worker.repository.registry import field_registry

_rs = rules_state.c


def rules_current(collection_id: Any) -> sa.Exists:
    """True while the collection's index was computed under this code's rules."""
    return sa.exists(
        sa.select(1).where(
            _rs.collection_id == collection_id,
            _rs.indexed_extraction_version == EXTRACTION_VERSION,
            _rs.indexed_rules_revision == _rs.rules_revision,
        )
    )


def record_indexed_rules(
    conn: sa.Connection, collection_id: str, fields_fingerprint: str | None = None
) -> None:
    """The collection is indexed under the running rules, with the fields whose fingerprint is
    ``fields_fingerprint`` (default: its fields as the registry has them now): call in the
    transaction that makes its coverage ``complete`` (that transaction's guards hold the rules
    still: a change to the declared rules moves the collection's epoch)."""
    indexed = fields_fingerprint or field_registry.fields_fingerprint(conn, collection_id)
    insert = insert_factory_for(conn.dialect.name)(rules_state).values(
        collection_id=collection_id,
        indexed_extraction_version=EXTRACTION_VERSION,
        indexed_rules_revision=0,
        indexed_fields=indexed,
        updated_at=db_now(),
    )
    conn.execute(
        insert.on_conflict_do_update(
            index_elements=[_rs.collection_id],
            set_={
                "indexed_extraction_version": EXTRACTION_VERSION,
                "indexed_rules_revision": _rs.rules_revision,
                "indexed_fields": indexed,
                "updated_at": db_now(),
            },
        )
    )


def note_complete(conn: sa.Connection, collection_ids: Sequence[str]) -> None:
    """Remember that these scopes' coverage became ``complete`` now: call in the transaction
    that made it so. The status row forgets once coverage leaves ``complete``; this is what an
    operator is told meanwhile ("last complete at")."""
    if not collection_ids:
        return
    conn.execute(
        rules_state.update()
        .where(_rs.collection_id.in_(list(collection_ids)))
        .values(last_complete_at=db_now())
    )
