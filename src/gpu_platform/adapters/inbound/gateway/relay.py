"""Send one request to a replica and relay its answer, bytes as they come.

The body goes upstream as the client sent it, on a pooled keep-alive connection
(`UpstreamPool`); the answer comes back piece by piece as the replica writes it (framing
removed, bytes untouched, no buffering), so server-sent events reach the client as they are
made. Only failures before the request reached the replica (refused, connect timed out) are
retried, on another replica: the replica cannot have acted on the request. Before the answer
has begun, a replica that breaks off is a 502 (`upstream_error`) and one that says nothing for
the read timeout a 504 (`upstream_timeout`); one that breaks off mid-answer ends the client's
response unfinished (the client sees a broken stream), since a retry could repeat half an
answer.

Usage is read from the end of the answer (the last two chunks: `"usage": {...}` in a JSON
body, or the last server-sent event when the client asked for
`stream_options.include_usage`); a stream without it counts its events as completion tokens.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from gpu_platform.adapters.inbound.gateway.errors import GatewayError
from gpu_platform.adapters.inbound.gateway.exchange import Exchange
from gpu_platform.adapters.inbound.gateway.upstream import (
    UpstreamError,
    UpstreamPool,
    UpstreamResponse,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from gpu_platform.application.gateway.routing import ReplicaBalancer
from gpu_platform.ports.inbound.model_routes import ModelRoute

__all__ = ["Outcome", "Relay", "usage_in"]

_HOP = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade"}
)
_WHOLE = 4 << 20  # non-streamed answers up to this size are read whole before relaying
_PROMPT = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')
_COMPLETION = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')


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
    """Forwards requests for the gateway; owns the connection pool and the balancer."""

    def __init__(self, pool: UpstreamPool, balancer: ReplicaBalancer, retries: int) -> None:
        self.pool = pool
        self.balancer = balancer
        self.retries = retries

    async def forward(
        self,
        route: ModelRoute,
        path: str,
        body: bytes,
        exchange: Exchange,
        *,
        stream: bool,
        session: bytes | None,
        started: float,
        outcome: Outcome,
    ) -> None:
        """Relay the answer of a replica of `route` to `exchange`, filling in `outcome`; raises
        GatewayError (nothing sent yet) when no replica takes the request."""
        balancer = self.balancer
        tried: list[str] = []
        while len(tried) <= self.retries:
            replica = balancer.choose(route, time.monotonic(), session, tried)
            if replica is None:
                break
            tried.append(replica.replica_id)
            balancer.started(replica.replica_id)
            try:
                try:
                    response = await self.pool.post(replica.url, path, body)
                except UpstreamUnreachable:
                    balancer.refused(replica.replica_id, time.monotonic())
                    continue
                except UpstreamTimeout as exc:
                    raise GatewayError(
                        504,
                        "upstream_timeout",
                        f"replica {replica.replica_id} of {route.model!r}: {exc}",
                    ) from None
                except UpstreamError as exc:
                    raise GatewayError(
                        502,
                        "upstream_error",
                        f"replica {replica.replica_id} of {route.model!r} failed: {exc}",
                    ) from None
                balancer.answered(replica.replica_id)
                complete = False
                try:
                    complete = await _relay(response, exchange, stream, started, outcome)
                finally:
                    response.release(complete)  # closed unless read to the end
                return
            finally:
                balancer.finished(replica.replica_id)
        if tried:
            message = f"no replica of {route.model!r} answered (tried {', '.join(tried)})"
        else:
            message = f"model {route.model!r} has no ready replica"
        raise GatewayError(503, "no_ready_replica", message, retry_after_s=1)


async def _relay(
    response: UpstreamResponse, out: Exchange, stream: bool, started: float, outcome: Outcome
) -> bool:
    """Send the answer on; True when the replica's answer was read to its end. Each piece goes
    to the client as soon as it is read (the first with the head), so a stream's first event
    never waits for its second."""
    headers = [(k, v) for k, v in response.headers if k not in _HOP]
    length = response.length
    try:
        first = await response.read()  # often the whole body: head and body in one write
        if not stream and length is not None and length <= _WHOLE:
            while len(first) < length:  # a whole answer or a 502, never a torn one
                first += await response.read()
    except UpstreamTimeout as exc:
        raise GatewayError(504, "upstream_timeout", str(exc)) from None
    except UpstreamError as exc:
        raise GatewayError(502, "upstream_error", str(exc)) from None
    outcome.first_byte_s = time.perf_counter() - started
    outcome.status = response.status
    previous = b""
    last = first
    events = first.count(b"data: ") if stream else 0
    if not first or response.length == 0:  # all of it
        outcome.complete = True
        await out.start(response.status, headers, first, False)
    else:
        await out.start(response.status, headers, first, True)
        try:
            chunk = await response.read()
            while chunk:
                if stream:
                    events += chunk.count(b"data: ")
                previous, last = last, chunk
                if response.length == 0:
                    break
                await out.send(chunk, True)
                chunk = await response.read()
        except UpstreamError:
            outcome.status = 0  # the replica broke off: leave the client's response unfinished
            return False
        outcome.complete = True
        await out.send(chunk, False)
    if response.status < 300:
        found = usage_in(previous + last)
        if found is not None:
            outcome.prompt_tokens, outcome.completion_tokens = found
        elif stream:
            outcome.completion_tokens = max(0, events - 1)  # every event but [DONE]
    return True
