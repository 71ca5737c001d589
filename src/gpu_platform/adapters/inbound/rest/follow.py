"""`logs?follow=true` polling loops that end when their client goes.

A follow polls the job (and its log) every `FOLLOW_POLL_S`; between polls it waits for the
client's `http.disconnect` instead of sleeping (`client_gone`), so a client that hangs up
ends the loop within one poll even while the job prints nothing. (Starlette's
`Request.is_disconnected()` cannot see a disconnect through `BaseHTTPMiddleware` layers: its
zero-time receive is cancelled before it reaches the server.) `FollowCount` counts live
loops (`app.state.follows`), so tests and operators can see none is left behind.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import anyio
from fastapi import Request

__all__ = ["FOLLOW_POLL_S", "FollowCount", "client_gone"]

FOLLOW_POLL_S = 0.2


class FollowCount:
    """How many `logs?follow=true` polling loops are live (`app.state.follows`)."""

    def __init__(self) -> None:
        self.live = 0

    def opened(self) -> None:
        self.live += 1

    def closed(self) -> None:
        self.live -= 1


async def client_gone(request: Request, seconds: float = FOLLOW_POLL_S) -> bool:
    """Wait up to `seconds` for the client to disconnect; True if it has."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        message: Mapping[str, object] = {}
        with anyio.move_on_after(left):
            message = await request.receive()
        if message.get("type") == "http.disconnect":
            return True
    return False
