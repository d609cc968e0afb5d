"""Beat's scheduler, with a liveness file a container healthcheck can read.

Celery beat answers no ``inspect ping``; a healthcheck that only saw its process would call a
beat stuck on a dead broker healthy. Every pass of the scheduler loop (at least every
``beat_max_loop_interval`` seconds) touches ``MEDIA_USAGE_BEAT_LIVENESS_FILE`` when it is set,
so "the file changed within the last minutes" means "beat is scheduling".
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from celery.beat import PersistentScheduler

log = logging.getLogger(__name__)
LIVENESS_FILE_ENV = "MEDIA_USAGE_BEAT_LIVENESS_FILE"


class LivenessScheduler(PersistentScheduler):
    """Celery's persistent scheduler, touching the liveness file on every pass."""

    _touch_failed = False

    def tick(self, *args: Any, **kwargs: Any) -> float:
        path = os.environ.get(LIVENESS_FILE_ENV)
        if path:
            try:
                Path(path).touch()
            except OSError as exc:
                if not self._touch_failed:  # one line, not one per pass
                    log.warning("cannot touch %s=%s: %s", LIVENESS_FILE_ENV, path, exc)
                self._touch_failed = True
        interval: float = super().tick(*args, **kwargs)
        return interval
