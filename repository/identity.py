"""The two predicates every guard is built from: "this (id, slug) is the registered collection"
and "this is the collection's status row". One definition, so no guard can drift from another.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from repository.schema import ADAPTER_ID, SCOPE_TYPE, collections, index_status


def registered(collection_id: Any, slug: Any) -> sa.Exists:
    """True while ``_emdash_collections`` holds exactly this id with exactly this slug."""
    return sa.exists(
        sa.select(1).where(collections.c.id == collection_id, collections.c.slug == slug)
    )


def status_row(collection_id: Any, slug: Any) -> list[sa.ColumnElement[bool]]:
    """The collection's ``content-media`` status row, matched on both id and slug."""
    st = index_status.c
    return [
        st.adapter_id == ADAPTER_ID,
        st.scope_type == SCOPE_TYPE,
        st.collection_id == collection_id,
        st.scope_key == slug,
    ]
