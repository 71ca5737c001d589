"""GatewayHttpServer: the gateway's own port (`gateway_port`), a lean HTTP/1.1 server on an
asyncio Protocol with httptools' parser, speaking only what the gateway needs.

Why not uvicorn: per request it costs an ASGI scope, message dicts, a task for the app and one
to watch for a disconnect, and it writes a response's head and body in two `send`s. Here a
request is parsed by callbacks straight into an `Exchange` (`_Request`), answered by
`GatewayHandler.handle` (the same code as behind the REST port), and a short answer goes out
head and body in one write.

What it speaks:
- keep-alive (HTTP/1.1 by default, HTTP/1.0 with `Connection: keep-alive`); pipelined requests
  are answered in order; an idle connection is closed after `keep_alive_s`;
- a body read whole before the handler runs, at most `max_body_bytes` kept (more is read and
  dropped, then answered 413); `Expect: 100-continue` is answered;
- answers framed by their `Content-Length`, or chunked when their length is unknown (a relayed
  stream: each piece is written as it comes, nothing is buffered); writing waits while the
  client's socket buffer is full (`pause_writing`);
- a malformed request (or an upgrade) is a 400 in the OpenAI error shape and the connection
  closes; any path but the gateway's is a 404 `unknown_url`;
- a client that goes away while its answer is being relayed cancels the handler (which closes
  the replica's connection and counts a 499); an answer the handler leaves unfinished (a replica
  that broke off mid-stream) closes the connection, so the client sees a torn response.

One server runs on one event loop; `start`, `stop` and everything else are called on it.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections import deque
from http import HTTPStatus
from typing import cast
from urllib.parse import unquote

import httptools
import structlog

from gpu_platform.adapters.inbound.gateway.errors import GatewayError
from gpu_platform.adapters.inbound.gateway.exchange import Headers, send_error
from gpu_platform.adapters.inbound.gateway.handler import GATEWAY_PATHS, GatewayHandler, too_large
from gpu_platform.adapters.inbound.gateway.relay import Outcome

__all__ = ["GatewayHttpServer"]

log = structlog.get_logger(__name__)

_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}
_MAX_HEAD = 64 << 10  # request line and headers
_MAX_PIPELINED = 16  # requests waiting behind the one being answered, before reading pauses
_SWEEP_S = 5.0
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_NO_BODY = frozenset({204, 304})


class GatewayHttpServer:
    """Serves `handler` on a TCP port of the running event loop."""

    def __init__(self, handler: GatewayHandler, *, keep_alive_s: float = 75.0) -> None:
        self.handler = handler
        self.keep_alive_s = keep_alive_s
        self.connections: set[_Connection] = set()
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), host, port, ssl=ssl_context, backlog=2048
        )
        self._sweeper = loop.call_later(_SWEEP_S, self._sweep)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def _sweep(self) -> None:
        """Close connections idle (or sending a request slowly) for longer than keep_alive_s."""
        loop = asyncio.get_running_loop()
        oldest = loop.time() - self.keep_alive_s
        for conn in list(self.connections):
            if conn.current is None and conn.last_active < oldest:
                conn.close()
        self._sweeper = loop.call_later(_SWEEP_S, self._sweep)

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, let answers in progress finish for up to `grace_s`, close the rest."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while True:
            for conn in list(self.connections):
                if conn.current is None:
                    conn.close()
            if not self.connections or loop.time() >= deadline:
                break
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            conn.close()
        await self.handler.aclose()


class _Connection(asyncio.Protocol):
    """One client connection: parses requests and answers them one after another."""

    def __init__(self, server: GatewayHttpServer) -> None:
        self.server = server
        self.handler = server.handler
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.client = ""
        self.closed = False
        self.last_active = self.loop.time()
        self.parsing: _Request | None = None  # the request being received
        self.current: _Request | None = None  # the request being answered
        self.waiting: deque[_Request] = deque()
        self.task: asyncio.Task[None] | None = None
        self.head_bytes = 0
        self.reading_paused = False
        self.drain: asyncio.Future[None] | None = None

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's are not subclasses)
        peer = transport.get_extra_info("peername")
        self.client = peer[0] if isinstance(peer, tuple) else ""
        self.server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        self.last_active = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.fail(GatewayError(400, "invalid_request", "protocol upgrades are not supported"))
        except httptools.HttpParserError as exc:
            if isinstance(exc.__context__, GatewayError):  # from a callback: head too large
                self.fail(exc.__context__)
            else:
                self.fail(GatewayError(400, "invalid_request", f"malformed HTTP request: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        self._wake()
        current = self.current
        if (
            current is not None
            and current.outcome is not None
            and not current.outcome.complete
            and self.task is not None
        ):
            self.task.cancel()  # the handler closes the replica's connection, counts a 499

    def pause_writing(self) -> None:
        if self.drain is None:
            self.drain = self.loop.create_future()

    def resume_writing(self) -> None:
        self._wake()

    def _wake(self) -> None:
        drain, self.drain = self.drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    # httptools callbacks

    def on_message_begin(self) -> None:
        self.parsing = _Request(self)
        self.head_bytes = 0

    def on_url(self, url: bytes) -> None:
        request = self.parsing
        assert request is not None
        request.url += url
        self._count(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        request = self.parsing
        assert request is not None
        self._count(len(name) + len(value))
        name = name.lower()
        if name == b"authorization":
            request.authorization = value
        elif name == self.handler.session_header:
            request.session = value
        elif name == b"expect" and value.lower() == b"100-continue":
            request.expect = True

    def _count(self, size: int) -> None:
        self.head_bytes += size
        if self.head_bytes > _MAX_HEAD:
            message = f"the request head is over {_MAX_HEAD} bytes"
            raise GatewayError(431, "invalid_request", message)

    def on_headers_complete(self) -> None:
        request = self.parsing
        assert request is not None
        request.method = self.parser.get_method().decode("latin-1")
        path = request.url.split(b"?", 1)[0].decode("latin-1")
        request.path = unquote(path) if "%" in path else path
        if request.expect and self.current is None and self.transport is not None:
            self.transport.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        request = self.parsing
        assert request is not None
        request.size += len(body)
        if request.size <= request.limit:
            request.parts.append(body)
        else:
            request.parts.clear()  # read on, keep nothing: it is answered 413

    def on_message_complete(self) -> None:
        request, self.parsing = self.parsing, None
        assert request is not None
        request.keep_alive = self.parser.should_keep_alive()
        if self.current is None:
            self.current = request
            self.task = self.loop.create_task(self._answer_all(request))
        else:
            self.waiting.append(request)
            if len(self.waiting) > _MAX_PIPELINED and self.transport is not None:
                self.transport.pause_reading()
                self.reading_paused = True

    # answering

    async def _answer_all(self, request: _Request) -> None:
        while True:
            await self._answer(request)
            if self.closed:
                return
            if not request.finished or not request.keep_alive:
                self.close()  # an answer left unfinished: the client sees it torn
                return
            self.last_active = self.loop.time()
            if not self.waiting:
                self.current = self.task = None
                return
            request = self.current = self.waiting.popleft()
            if self.reading_paused and self.transport is not None:
                self.reading_paused = False
                self.transport.resume_reading()

    async def _answer(self, request: _Request) -> None:
        try:
            if request.path in GATEWAY_PATHS:
                await self.handler.handle(request)
            else:
                message = f"no such path: {request.path}"
                await send_error(request, GatewayError(404, "unknown_url", message))
        except Exception:
            log.exception("gateway request failed", path=request.path)
            if not request.started:
                request.keep_alive = False
                error = GatewayError(500, "internal_error", "the gateway failed on this request")
                await send_error(request, error)

    async def write(self, data: bytes) -> None:
        transport = self.transport
        if self.closed or transport is None:
            return
        transport.write(data)
        if self.drain is not None:
            await self.drain

    def fail(self, error: GatewayError) -> None:
        """A request that cannot be parsed: answer it (unless an answer is under way), close."""
        if self.transport is not None and not self.closed and self.current is None:
            headers = [(b"content-type", b"application/json")]
            self.transport.write(render(error.status, headers, error_body(error), False, False)[0])
        self.close()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class _Request:
    """One request on a `_Connection`; the Exchange the handler answers."""

    __slots__ = (
        "authorization",
        "chunked",
        "client",
        "conn",
        "expect",
        "finished",
        "keep_alive",
        "limit",
        "method",
        "outcome",
        "parts",
        "path",
        "session",
        "size",
        "started",
        "url",
    )

    def __init__(self, conn: _Connection) -> None:
        self.conn = conn
        self.client = conn.client
        self.limit = conn.handler.settings.max_body_bytes
        self.method = ""
        self.path = ""
        self.url = b""
        self.authorization: bytes | None = None
        self.session: bytes | None = None
        self.expect = False
        self.parts: list[bytes] = []
        self.size = 0
        self.keep_alive = True
        self.outcome: Outcome | None = None
        self.started = self.finished = self.chunked = False

    async def body(self) -> bytes:
        if self.size > self.limit:
            self.keep_alive = False
            raise too_large(self.limit)
        parts = self.parts
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def start(self, status: int, headers: Headers, body: bytes, more: bool) -> None:
        self.started = True
        self.finished = not more
        data, self.chunked = render(status, headers, body, more, self.keep_alive)
        await self.conn.write(data)

    async def send(self, body: bytes, more: bool) -> None:
        if not more:
            self.finished = True
        if not self.chunked:
            data = body
        elif more:
            data = b"%x\r\n%s\r\n" % (len(body), body)
        else:
            data = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"
        if data:
            await self.conn.write(data)

    def watch(self, outcome: Outcome) -> None:
        self.outcome = outcome

    def unwatch(self) -> None:
        self.outcome = None

    def left(self) -> bool:
        return self.conn.closed


def render(
    status: int, headers: Headers, body: bytes, more: bool, keep_alive: bool
) -> tuple[bytes, bool]:
    """An answer's head with its first body bytes, and whether the rest goes chunked: the
    answer keeps its own Content-Length; without one a whole answer gets one, and one with more
    to come is chunked."""
    parts = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown"))]
    sized = False
    for name, value in headers:
        if name == b"content-length":
            sized = True
        parts.append(b"%s: %s\r\n" % (name, value))
    chunked = False
    if not sized and status not in _NO_BODY:
        if more:
            chunked = True
            parts.append(b"transfer-encoding: chunked\r\n")
        else:
            parts.append(b"content-length: %d\r\n" % len(body))
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    parts.append(b"\r\n")
    if chunked:
        if body:
            parts.append(b"%x\r\n%s\r\n" % (len(body), body))
    else:
        parts.append(body)
    return b"".join(parts), chunked


def error_body(error: GatewayError) -> bytes:
    return json.dumps(error.body(), separators=(",", ":")).encode()
