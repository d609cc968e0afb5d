"""ULIDs, emdash's id format for every generated id (tokens, generations, registry rows).

A ULID is 48 bits of Unix milliseconds then 80 random bits, written as 26 characters of
Crockford's base 32. A batch writes hundreds of occurrence rows, each with an id, so the text
is built here directly (a few times faster than through ``ulid.ULID``).
"""

import os
import time

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_SHIFTS = tuple(range(125, -1, -5))


def new_ulid() -> str:
    # An id, not a lease or a due time: the process clock is what ULIDs are made from.
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    return "".join([_CROCKFORD[(value >> shift) & 31] for shift in _SHIFTS])
