"""ULIDs as emdash writes them: 26 Crockford base-32 characters, milliseconds first."""

from __future__ import annotations

import re
import time

from media_usage_worker.repository.base.ids import new_ulid

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _decode(text: str) -> int:
    value = 0
    for char in text:
        value = value * 32 + CROCKFORD.index(char)
    return value


def test_a_ulid_is_26_crockford_characters_with_the_time_first() -> None:
    before = time.time_ns() // 1_000_000
    ids = [new_ulid() for _ in range(1000)]
    after = time.time_ns() // 1_000_000
    assert all(re.fullmatch(r"[0-7][0-9A-HJKMNP-TV-Z]{25}", i) for i in ids)
    assert all(before <= _decode(i) >> 80 <= after for i in ids)
    assert len(set(ids)) == len(ids)  # 80 random bits each
    # Most significant character first: text order is numeric order, so ids sort by time.
    assert sorted(ids) == sorted(ids, key=_decode)
