"""``HEAD`` on every ``GET`` route, as HTTP expects of a server (probes and curl -I use it)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    """Answers ``HEAD`` as the same ``GET`` would, headers only: the route runs as a ``GET``
    and the body is dropped on the way out (``Content-Length`` still says what ``GET``
    sends). Routes that only take other methods answer 405 as before."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)
