"""Send one request to a replica and relay its answer, bytes as they come.

The body goes upstream as the client sent it; the answer comes back chunk by chunk
(`aiter_raw`: no decoding, no buffering), so server-sent events reach the client as the
replica writes them. Only connection failures before the request was sent (refused, timed
out, a write that failed) are retried, on another replica: the replica cannot have acted on
the request. A replica that breaks off mid-answer ends the client's response unfinished
(the client sees a broken stream), since a retry could repeat half an answer.

Usage is read from the end of the answer (the last two chunks: `"usage": {...}` in a JSON
body, or the last server-sent event when the client asked for
`stream_options.include_usage`); a stream without it counts its events as completion tokens.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from gpu_platform.adapters.inbound.gateway.errors import GatewayError
from gpu_platform.application.gateway.routing import ReplicaBalancer
from gpu_platform.ports.inbound.model_routes import ModelRoute

__all__ = ["Outcome", "Relay", "usage_in"]

Send = Callable[[dict[str, Any]], Awaitable[None]]

_HOP = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade"}
)
_PROMPT = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')
_COMPLETION = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_RETRIED = (httpx.ConnectError, httpx.ConnectTimeout, httpx.WriteError, httpx.PoolTimeout)


def usage_in(tail: bytes) -> tuple[int, int] | None:
    """(prompt, completion) tokens from the last ``"usage"`` object in `tail`, if any."""
    at = tail.rfind(b'"usage"')
    if at < 0:
        return None
    prompt = _PROMPT.search(tail, at)
    completion = _COMPLETION.search(tail, at)
    if prompt is None and completion is None:
        return None  # "usage": null
    return (
        0 if prompt is None else int(prompt.group(1)),
        0 if completion is None else int(completion.group(1)),
    )


@dataclass(slots=True)
class Outcome:
    """How a relayed request ended: `status` as the client saw it (0: broken off midway);
    `complete` once the last bytes are being sent to the client."""

    status: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    first_byte_s: float | None = None
    complete: bool = False


class Relay:
    """Forwards requests for the gateway; owns the pooled client and the balancer."""

    def __init__(self, client: httpx.AsyncClient, balancer: ReplicaBalancer, retries: int) -> None:
        self.client = client
        self.balancer = balancer
        self.retries = retries
        self._urls: dict[tuple[str, str], httpx.URL] = {}  # parsed once: half of build_request

    def _url(self, base: str, path: str) -> httpx.URL:
        url = self._urls.get((base, path))
        if url is None:
            if len(self._urls) > 4096:  # replicas come and go
                self._urls.clear()
            url = self._urls[(base, path)] = httpx.URL(base.rstrip("/") + path)
        return url

    async def forward(
        self,
        route: ModelRoute,
        path: str,
        body: bytes,
        headers: list[tuple[bytes, bytes]],
        send: Send,
        *,
        stream: bool,
        session: bytes | None,
        started: float,
        outcome: Outcome,
    ) -> None:
        """Relay the answer of a replica of `route` to `send`, filling in `outcome`; raises
        GatewayError (nothing sent yet) when no replica takes the request."""
        balancer = self.balancer
        tried: list[str] = []
        while len(tried) <= self.retries:
            now = time.monotonic()
            replica = balancer.choose(route, now, session, tried)
            if replica is None:
                break
            tried.append(replica.replica_id)
            balancer.started(replica.replica_id)
            try:
                request = self.client.build_request(
                    "POST", self._url(replica.url, path), content=body, headers=headers
                )
                try:
                    response = await self.client.send(request, stream=True)
                except _RETRIED:
                    balancer.refused(replica.replica_id, time.monotonic())
                    continue
                except httpx.HTTPError as exc:
                    raise GatewayError(
                        502,
                        "upstream_error",
                        f"replica {replica.replica_id} of {route.model!r} failed: {exc!r}",
                    ) from None
                balancer.answered(replica.replica_id)
                try:
                    await _relay(response, send, stream, started, outcome)
                    return
                finally:
                    await response.aclose()
            finally:
                balancer.finished(replica.replica_id)
        if tried:
            message = f"no replica of {route.model!r} answered (tried {', '.join(tried)})"
        else:
            message = f"model {route.model!r} has no ready replica"
        raise GatewayError(503, "no_ready_replica", message, retry_after_s=1)


async def _relay(
    response: httpx.Response, send: Send, stream: bool, started: float, outcome: Outcome
) -> None:
    headers = [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    outcome.status = response.status_code
    previous = last = b""
    events = 0
    try:
        async for chunk in response.aiter_raw():
            if outcome.first_byte_s is None:
                outcome.first_byte_s = time.perf_counter() - started
            if stream:
                events += chunk.count(b"data: ")
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            previous, last = last, chunk
    except httpx.HTTPError:
        outcome.status = 0  # the replica broke off: leave the client's response unfinished
        return
    outcome.complete = True
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    if response.status_code < 300:
        found = usage_in(previous + last)
        if found is not None:
            outcome.prompt_tokens, outcome.completion_tokens = found
        elif stream:
            outcome.completion_tokens = max(0, events - 1)  # every event but [DONE]
