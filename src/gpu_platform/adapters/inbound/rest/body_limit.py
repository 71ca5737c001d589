"""Request bodies larger than a limit are refused with 413 before they are read whole.

ASGI middleware. A `Content-Length` over the limit is answered at once, without reading a
byte of the body, and the connection is closed (`Connection: close`), so the client cannot go
on streaming into the server. A body without a length (chunked) is counted as it arrives and
refused as soon as it passes the limit: the server never holds more than the limit plus one
chunk of it. The answer is a problem detail naming the limit:

    413 {"type": "urn:gpu-platform:problem:payload-too-large", "detail":
         "request body larger than 1048576 bytes (setting max_request_bytes)", ...}
"""

from __future__ import annotations

import json
from typing import Any

from starlette.exceptions import HTTPException

__all__ = ["DEFAULT_MAX_REQUEST_BYTES", "BodyLimit"]

DEFAULT_MAX_REQUEST_BYTES = 1 << 20


def _detail(limit: int) -> str:
    return f"request body larger than {limit} bytes (setting max_request_bytes)"


def _problem(limit: int) -> bytes:
    return json.dumps(
        {
            "type": "urn:gpu-platform:problem:payload-too-large",
            "title": "Payload too large",
            "status": 413,
            "detail": _detail(limit),
        }
    ).encode()


class BodyLimit:
    """Refuse HTTP request bodies over `max_bytes` with 413 (see the module docstring)."""

    def __init__(self, app: Any, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _refuse(self, send: Any) -> None:
        body = _problem(self.max_bytes)
        headers = [
            (b"content-type", b"application/problem+json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit:
                    await self._refuse(send)
                    return
        seen = 0

        async def counted() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:  # the app's problem handlers answer it (413, closing)
                    raise HTTPException(413, _detail(limit), headers={"Connection": "close"})
            return message

        await self.app(scope, counted, send)
