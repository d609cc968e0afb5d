"""kombu's Redis transport, hardened against entries that are not kombu envelopes.

A Redis list entry is JSON that kombu turns into a message. Anything else pushed onto the queue
(``LPUSH media_usage garbage``) makes kombu raise inside the consumer's event loop, which Celery
treats as unrecoverable. Here such an entry, already popped by ``BRPOP`` and never marked
unacknowledged, is dropped with one log line and counted, and the loop goes on. Messages that
are envelopes are checked again, as messages, by ``tasks.consumer``.

The same holds for kombu's ``unacked`` hash, which every worker replays at start-up and on a
timer (``restore_visible``): an entry there that is not ``[message, exchange, routing_key]``
would stop every worker from starting. It is removed with one log line instead.

``tasks.app`` uses this transport for ``redis://`` and ``rediss://`` broker URLs.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis
from kombu.utils.json import loads

from media_usage_worker.domain.errors import InvalidMessage
from media_usage_worker.tasks.consumer import dropped, message_label
from media_usage_worker.tasks.envelope import check_envelope

log = logging.getLogger("media_usage.messages")


def _drop(reason: str, entry: object = None) -> None:
    dropped.add(reason)
    headers = entry.get("headers") if isinstance(entry, dict) else None
    log.warning("dropped broker entry id=%s: %s", message_label(headers), reason)


def _unacked_entry(raw: Any) -> tuple[dict[str, Any], str, str] | None:
    """An ``unacked`` hash value as kombu wrote it, or ``None`` for anything else."""
    try:
        entry = loads(raw.decode() if isinstance(raw, bytes) else raw)
    except (ValueError, TypeError, RecursionError, UnicodeDecodeError):
        return None
    if not (isinstance(entry, list) and len(entry) == 3):
        return None
    message, exchange, routing_key = entry
    if not (
        isinstance(message, dict) and isinstance(exchange, str) and isinstance(routing_key, str)
    ):
        return None
    try:
        check_envelope(message)
    except InvalidMessage:
        return None
    return message, exchange, routing_key


class GuardedQoS(redis.QoS):
    def restore_by_tag(self, tag: Any, client: Any = None, leftmost: bool = False) -> None:
        # kombu's own, except that an entry it cannot restore is removed, not raised on.
        def restore_transaction(pipe: Any) -> None:
            raw = pipe.hget(self.unacked_key, tag)
            pipe.multi()
            self._remove_from_indices(tag, pipe)
            if raw:
                entry = _unacked_entry(raw)
                if entry is None:
                    _drop("an unacknowledged entry in Redis is not a kombu message")
                    return
                self.channel._do_restore_message(*entry, pipe, leftmost)

        with self.channel.conn_or_acquire(client) as connected:
            connected.transaction(restore_transaction, self.unacked_key)


class GuardedChannel(redis.Channel):
    QoS = GuardedQoS

    def _restore(self, message: Any, leftmost: bool = False) -> None:
        # A message this worker rejected goes back through the guarded restore.
        if not self.ack_emulation:
            super()._restore(message)
            return
        self.qos.restore_by_tag(message.delivery_tag, leftmost=leftmost)

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
