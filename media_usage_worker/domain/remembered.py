"""The unused selection's totals, remembered for one state of the index and the library.

Counting a whole selection of unused items reads every library row against the index (an
anti-join of the library and the occurrences), while the page itself is a short index walk. As
long as neither side changes, the count cannot either; a server asked for the first page again
and again counts once. The key is the state the database reports (the data layer reads it in
the listing's own transaction: coverage epochs and status times, the library's count, bytes
and newest row, the last clean-up action, the day); an entry also ages out after
``max_age_seconds`` for host edits the key cannot see, such as a mime type changed in place.

Only totals are remembered: which items a page shows, and whether any of them may be retired,
is read afresh every time.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

Totals = tuple[int, int]  # count, bytes

MAX_AGE_SECONDS = 60.0
CAPACITY = 64  # selections (filter and state) remembered at once


class RememberedTotals:
    """A small, thread-safe map of selection states to their totals, oldest forgotten first."""

    def __init__(
        self,
        *,
        max_age_seconds: float = MAX_AGE_SECONDS,
        capacity: int = CAPACITY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_age = max_age_seconds
        self._capacity = capacity
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[float, Totals]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def recall(self, key: Hashable) -> Totals | None:
        """The totals remembered for ``key``, unless none are or they are too old."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or self._clock() - entry[0] > self._max_age:
                self._entries.pop(key, None)
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[1]

    def remember(self, key: Hashable, totals: Totals) -> None:
        with self._lock:
            self._entries[key] = (self._clock(), totals)
            self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)

    def forget(self) -> None:
        with self._lock:
            self._entries.clear()
