"""Keep a work lease alive while its item is legitimately being processed.

A background thread renews the lease (a fenced UPDATE on token and version) every
``every_seconds``. It stops when processing ends, when the lease is lost (someone else took the
row, or a new version fenced it), or at ``max_seconds`` after the claim, so a hung worker still
gives the item up: the task's hard time limit sits below that bound. A worker that dies stops
renewing, and its lease expires ``lease_seconds`` after the last renewal.
"""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType

from domain.work import WorkRecord
from repository.work import MediaUsageWorkRepository

log = logging.getLogger(__name__)


class LeaseHeartbeat:
    def __init__(
        self,
        repo: MediaUsageWorkRepository,
        claimed: WorkRecord,
        *,
        lease_seconds: int,
        every_seconds: float,
        max_seconds: float,
    ) -> None:
        self._repo = repo
        self._claimed = claimed
        self._lease_seconds = lease_seconds
        self._every = every_seconds
        self._deadline = time.monotonic() + max_seconds
        self._stop = threading.Event()
        self.lost = threading.Event()
        self.renewals = 0
        self._thread = threading.Thread(target=self._run, name="media-usage-lease", daemon=True)

    def __enter__(self) -> LeaseHeartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=self._every + 5)

    def _run(self) -> None:
        claimed = self._claimed
        while not self._stop.wait(self._every):
            if time.monotonic() >= self._deadline:
                return
            try:
                expiry = self._repo.extend_lease(
                    collection_id=claimed.collection_id,
                    content_id=claimed.content_id,
                    work_version=claimed.work_version,
                    lease_token=claimed.lease_token,
                    lease_duration_seconds=self._lease_seconds,
                )
            except Exception:  # a database blip: try again next beat, the lease still runs
                log.warning("lease renewal failed for %s", claimed.content_id, exc_info=True)
                continue
            if expiry is None:
                self.lost.set()
                return
            self.renewals += 1
