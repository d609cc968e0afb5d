"""kombu's Redis transport, hardened against entries that are not kombu envelopes.

A Redis list entry is JSON that kombu turns into a message. Anything else pushed onto the queue
(``LPUSH media_usage garbage``) makes kombu raise inside the consumer's event loop, which Celery
treats as unrecoverable. Here such an entry, already popped by ``BRPOP`` and never marked
unacknowledged, is dropped with one log line and counted, and the loop goes on. Messages that
are envelopes are checked again, as messages, by ``tasks.consumer``.

``tasks.app`` uses this transport for ``redis://`` and ``rediss://`` broker URLs.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis

from media_usage_worker.domain.errors import InvalidMessage
from media_usage_worker.domain.messages import check_envelope
from media_usage_worker.tasks.consumer import dropped, message_label

log = logging.getLogger("media_usage.messages")


def _drop(reason: str, entry: object = None) -> None:
    dropped.add(reason)
    headers = entry.get("headers") if isinstance(entry, dict) else None
    log.warning("dropped broker entry id=%s: %s", message_label(headers), reason)


class GuardedChannel(redis.Channel):
    def _brpop_read(self, **options: Any) -> Any:
        try:
            return super()._brpop_read(**options)
        except (ValueError, RecursionError, TypeError, KeyError) as exc:
            # kombu decodes the popped entry before anything else sees it; nothing is lost but
            # the entry itself, and the next read continues.
            _drop(f"the broker entry is not a JSON envelope ({type(exc).__name__})")
            return True


class GuardedRedisTransport(redis.Transport):
    Channel = GuardedChannel

    def _deliver(self, message: Any, queue: Any) -> None:
        try:
            check_envelope(message)
        except InvalidMessage as exc:
            _drop(str(exc), message)
            return
        super()._deliver(message, queue)
