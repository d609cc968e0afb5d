"""What the console (and any operator) reads of one media item and of the quarantine: the item
as the library or the quarantine holds it, the retired items newest first, and the audit rows
that name one item."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from media_usage_worker.domain.cleanup import UnusedItem
from media_usage_worker.repository.base.db import Bind, read_transaction
from media_usage_worker.repository.base.schema import audit, media, quarantine

_m, _q, _a = media.c, quarantine.c, audit.c


@dataclass(frozen=True)
class MediaItem(UnusedItem):
    """A library item (what the unused listing shows of one), or a retired one in the
    quarantine: then ``retired_at``, ``retired_by`` and ``reason`` are set."""

    retired_at: str | None = None
    retired_by: str | None = None
    reason: str | None = None


_ITEM = (_m.id, _m.filename, _m.mime_type, _m.size, _m.storage_key, _m.created_at)
_RETIRED = (
    _q.id, _q.filename, _q.mime_type, _q.size, _q.storage_key, _q.created_at,
    _q.retired_at, _q.retired_by, _q.reason,
)  # fmt: skip


def _item(row: sa.RowMapping) -> MediaItem:
    return MediaItem(**row)


def find_media_item(bind: Bind, media_id: str) -> MediaItem | None:
    """The item with this id in the library, else in the quarantine; None when neither has
    it (never existed, or purged)."""
    with read_transaction(bind) as conn:
        row = conn.execute(sa.select(*_ITEM).where(_m.id == media_id)).mappings().first()
        if row is None:
            row = conn.execute(sa.select(*_RETIRED).where(_q.id == media_id)).mappings().first()
    return None if row is None else _item(row)


def quarantine_page(bind: Bind, limit: int, before: tuple[str, str] | None) -> list[MediaItem]:
    """Retired items, the most recently retired first, after the position ``before``
    (``retired_at``, id) of the previous page's last item."""
    query = sa.select(*_RETIRED).order_by(_q.retired_at.desc(), _q.id.desc()).limit(limit)
    if before is not None:
        query = query.where(sa.tuple_(_q.retired_at, _q.id) < sa.tuple_(*before))
    with read_transaction(bind) as conn:
        return [_item(row) for row in conn.execute(query).mappings()]


def history(bind: Bind, media_id: str, limit: int) -> list[dict[str, Any]]:
    """The audit's actions that name ``media_id``, newest first: who retired, restored or
    purged it, and when."""
    # The JSON list holds each id as json.dumps writes it; LIKE narrows, the parse decides.
    named = _a.media_ids.contains(json.dumps(media_id), autoescape=True)
    query = sa.select(audit).where(named).order_by(_a.at.desc(), _a.id.desc())
    found: list[dict[str, Any]] = []
    with read_transaction(bind) as conn:
        for row in conn.execute(query):
            ids = json.loads(row.media_ids)
            if media_id in ids:
                found.append({**row._mapping, "media_ids": ids})
                if len(found) == limit:
                    break
    return found
