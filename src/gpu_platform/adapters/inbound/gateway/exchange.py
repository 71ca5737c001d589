"""Exchange: one client request as the gateway's handler sees it, whatever server carries it.

Two servers carry gateway requests: the REST app's ASGI stack (`asgi.AsgiExchange`) and the
gateway's own port (`http_server`, HTTP/1.1 on asyncio and httptools). Each gives the handler
the same few things, so the code that handles a request is written once
(`handler.GatewayHandler`):

- the request line and the two headers the gateway reads (the API key, the session header);
- `body()`: the whole body, or GatewayError 413 when it is over the limit;
- `start(status, headers, body, more)` then `send(body, more)` for the answer (the head and its
  first bytes together, so a short answer is one write); `more=False` ends it;
- `watch(outcome)` / `unwatch()` around relaying: while watched, a client that goes away before
  `outcome.complete` cancels the handler's task, and `left()` is then true.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gpu_platform.adapters.inbound.gateway.errors import GatewayError
    from gpu_platform.adapters.inbound.gateway.relay import Outcome

__all__ = ["Exchange", "Headers", "send_error", "send_json"]

Headers = list[tuple[bytes, bytes]]


class Exchange(Protocol):
    """One request and its answer (see the module docstring)."""

    method: str
    path: str
    authorization: bytes | None
    session: bytes | None
    client: str  # the client's address ("" when unknown)

    async def body(self) -> bytes: ...

    async def start(self, status: int, headers: Headers, body: bytes, more: bool) -> None: ...

    async def send(self, body: bytes, more: bool) -> None: ...

    def watch(self, outcome: Outcome) -> None: ...

    def unwatch(self) -> None: ...

    def left(self) -> bool: ...


_JSON = (b"content-type", b"application/json")


async def send_json(
    exchange: Exchange, status: int, payload: Any, extra: Headers | None = None
) -> None:
    data = json.dumps(payload, separators=(",", ":")).encode()
    headers = [_JSON, (b"content-length", b"%d" % len(data))]
    if extra:
        headers.extend(extra)
    await exchange.start(status, headers, data, False)


async def send_error(exchange: Exchange, error: GatewayError) -> None:
    extra = None
    if error.retry_after_s is not None:
        extra = [(b"retry-after", b"%d" % max(1, math.ceil(error.retry_after_s)))]
    await send_json(exchange, error.status, error.body(), extra)
