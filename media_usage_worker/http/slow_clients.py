"""Connections that never finish their request are closed, so they cannot hold the server.

uvicorn times out idle keep-alive connections, but not one that trickles a request's headers
(or its body) a byte at a time: two hundred such connections were held for as long as their
clients liked. ``HeaderDeadlineProtocol`` gives every request, headers and body, a deadline
from the connection's start or the previous response's end, and closes the connection when it
passes (the handler waiting for the body then sees the client gone: ``http.bodies``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

# The client is still sending its request: its headers (IDLE) or its body (SEND_BODY).
_RECEIVING = (h11.IDLE, h11.SEND_BODY)


class HeaderDeadlineProtocol(H11Protocol):
    header_timeout_seconds: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state not in _RECEIVING:  # the whole request is here
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()  # the next request on this connection gets the same deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.header_timeout_seconds, self._too_slow)

    def _disarm(self) -> None:
        deadline = getattr(self, "_deadline", None)
        if deadline is not None:
            deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if self.conn.their_state in _RECEIVING and not self.transport.is_closing():
            self.transport.close()


def protocol_with(header_timeout_seconds: float) -> type[Any]:
    """The protocol class for ``uvicorn.Config(http=...)`` with this deadline."""
    return type(
        "HeaderDeadline",
        (HeaderDeadlineProtocol,),
        {"header_timeout_seconds": float(header_timeout_seconds)},
    )
