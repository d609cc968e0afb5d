"""Opaque keyset cursors for operator listings.

A cursor carries a position (``updated_at``, ``content_id``) plus a checksum, so a truncated,
edited or made-up cursor is rejected as ``InvalidCursor`` instead of silently paging from a
wrong place. The checksum also covers the listing's scope (which media id, which collection
and state), so a cursor handed to another listing is refused too, instead of skipping entries.
The checksum is not a secret: someone who forges a well-formed cursor only chooses a position
in a listing they may read anyway, and every value is a bound parameter.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from dataclasses import dataclass

from media_usage_worker.domain.errors import InvalidCursor

# Room for an id of 1,024 characters written as JSON escapes (six bytes each), in base64.
MAX_CURSOR_LENGTH = 16384
_CHECK_KEY = b"media-usage-worker/cursor/v2"
# Operator listings page by updated_at (sortable, or emdash's legacy text for old rows).
TIMESTAMP_ORDER = re.compile(r"\d{4}-\d\d-\d\d(T\d\d:\d\d:\d\d\.\d{3}Z| \d\d:\d\d:\d\d[0-9.+:]*)")
# Usage listings page by collection slug, or a source beyond content's scope key
# (``domain.host_sources``).
SLUG_ORDER = re.compile(r"[a-z][a-z0-9_]{0,62}|[a-z]+:[a-z_][a-z0-9_]{0,56}:[a-z_][a-z0-9_]{0,56}")


@dataclass(frozen=True)
class Cursor:
    order_value: str
    id: str


def usage_scope(media_id: str) -> str:
    """The scope of a usage listing's cursors: one media id."""
    return json.dumps(["usage", media_id])


def work_scope(collection_slug: str, state: str | None) -> str:
    """The scope of an operator work listing's cursors: one collection, one state (or all)."""
    return json.dumps(["work", collection_slug, state or ""])


def deletion_scope(state: str | None) -> str:
    """The scope of a deletion listing's cursors: one state (or all)."""
    return json.dumps(["deletions", state or ""])


def _check(scope: str, payload: bytes) -> str:
    # ASCII JSON of the scope: ids may hold lone surrogates (see encode_cursor).
    keyed = json.dumps(scope).encode("ascii") + b"\n" + payload
    return hmac.new(_CHECK_KEY, keyed, hashlib.sha256).hexdigest()[:16]


def encode_cursor(order_value: str, id: str, *, scope: str) -> str:
    """A cursor for the position (``order_value``, ``id``) of the listing ``scope`` names."""
    payload = base64.urlsafe_b64encode(
        # ASCII escapes: an id read from a SQLite host that is not UTF-8 holds lone surrogates,
        # which no UTF-8 encoder takes, while a JSON \u escape goes through and back.
        json.dumps([order_value, id], separators=(",", ":")).encode("ascii")
    )
    return f"{payload.decode('ascii').rstrip('=')}.{_check(scope, payload.rstrip(b'='))}"


def decode_cursor(
    token: object, order: re.Pattern[str] = TIMESTAMP_ORDER, *, scope: str
) -> Cursor | None:
    """``None`` or ``""`` is the first page; anything else must be a cursor this module wrote
    for the same ``scope`` whose order value has the listing's shape."""
    if token is None or token == "":
        return None
    if not isinstance(token, str) or len(token) > MAX_CURSOR_LENGTH or not token.isascii():
        raise InvalidCursor()
    payload, dot, check = token.partition(".")
    if not dot or not hmac.compare_digest(check, _check(scope, payload.encode("ascii"))):
        raise InvalidCursor()
    try:
        raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        order_value, id = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
        raise InvalidCursor() from None
    # The id may be empty: a host can store '' as an id, and the listing must page past it.
    if not (isinstance(order_value, str) and isinstance(id, str) and order_value):
        raise InvalidCursor()
    if not order.fullmatch(order_value):
        raise InvalidCursor()
    return Cursor(order_value, id)
