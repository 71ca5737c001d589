"""OpenAiGateway: ASGI middleware that answers the OpenAI API paths and passes the rest on.

It sits outside the REST app's own middleware (tracing, metrics, read consistency), so a
proxied request costs none of them. What it does with a request is `GatewayHandler.handle`;
this module only adapts ASGI's scope, receive and send to an `Exchange`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from gpu_platform.adapters.inbound.gateway.exchange import Headers
from gpu_platform.adapters.inbound.gateway.handler import GATEWAY_PATHS, GatewayHandler, too_large
from gpu_platform.adapters.inbound.gateway.relay import Outcome

__all__ = ["AsgiExchange", "OpenAiGateway"]

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class OpenAiGateway:
    """Starlette middleware: ``app.add_middleware(OpenAiGateway, handler=GatewayHandler(...))``."""

    def __init__(self, app: App, *, handler: GatewayHandler) -> None:
        self.app = app
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in GATEWAY_PATHS:
            handler = self.handler
            exchange = AsgiExchange(
                scope, receive, send, handler.session_header, handler.settings.max_body_bytes
            )
            await handler.handle(exchange)
        elif scope["type"] == "lifespan":
            await self.app(scope, self._closing(receive), send)
        else:
            await self.app(scope, receive, send)

    def _closing(self, receive: Receive) -> Receive:
        async def wrapped() -> dict[str, Any]:
            message = await receive()
            if message["type"] == "lifespan.shutdown":
                await self.handler.aclose()
            return message

        return wrapped


class AsgiExchange:
    """An Exchange over one ASGI http scope."""

    __slots__ = (
        "_limit",
        "_receive",
        "_send",
        "_watcher",
        "authorization",
        "client",
        "method",
        "path",
        "session",
    )

    def __init__(
        self, scope: Scope, receive: Receive, send: Send, session_header: bytes, limit: int
    ) -> None:
        self._receive = receive
        self._send = send
        self._limit = limit
        self._watcher: asyncio.Task[None] | None = None
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.authorization: bytes | None = None
        self.session: bytes | None = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                self.authorization = value
            elif name == session_header:
                self.session = value
        client = scope.get("client")
        self.client: str = client[0] if client else ""

    async def body(self) -> bytes:
        limit = self._limit
        message = await self._receive()
        body: bytes = message.get("body", b"")
        if not message.get("more_body", False):
            if len(body) > limit:
                raise too_large(limit)
            return body  # the usual case: one message, no copy
        parts = [body]
        size = len(body)
        while message.get("more_body", False):
            message = await self._receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            parts.append(chunk)
        return b"".join(parts)

    async def start(self, status: int, headers: Headers, body: bytes, more: bool) -> None:
        await self._send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send({"type": "http.response.body", "body": body, "more_body": more})

    async def send(self, body: bytes, more: bool) -> None:
        await self._send({"type": "http.response.body", "body": body, "more_body": more})

    def watch(self, outcome: Outcome) -> None:
        """Cancel the current task if the client disconnects before the answer is complete:
        the replica's connection is closed, so it stops generating for nobody."""
        task = asyncio.current_task()
        assert task is not None
        receive = self._receive

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            if not outcome.complete:  # (after the answer, servers report a disconnect too)
                task.cancel()

        self._watcher = asyncio.create_task(watch())

    def unwatch(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()

    def left(self) -> bool:
        return self._watcher is not None and self._watcher.done()
