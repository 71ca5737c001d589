"""OpenAiGateway: ASGI middleware that answers the OpenAI API paths and passes the rest on.

It sits outside the REST app's own middleware (tracing, metrics, read consistency), so the
proxy path is: read the body, authenticate the key (cached), parse the JSON once, look up the
model, check the key's limits, then `Relay.forward`. Nothing on it blocks the event loop: a key
not in the cache is verified on a worker thread.

Authentication: `Authorization: Bearer <token>`, the same tokens as the REST API, checked by
the same `AccessService.authenticate` (with auth off every caller is the anonymous admin).
A verified key is trusted for `auth_cache_s` seconds, so a revoked token stops working within
that time. Tenancy: a caller reaches the models of its own tenant; operators and admins
(`jobs.any-tenant`) reach every model. Another tenant's model reads as unknown (404).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread

from gpu_platform.adapters.inbound.gateway.errors import GatewayError, send_error, send_json
from gpu_platform.adapters.inbound.gateway.relay import Outcome, Relay
from gpu_platform.adapters.inbound.gateway.upstream import UpstreamPool
from gpu_platform.application.gateway.ledger import ServingLedger
from gpu_platform.application.gateway.limits import GatewayLimits, LimitSettings
from gpu_platform.application.gateway.routing import ReplicaBalancer
from gpu_platform.domain.model.tenancy import (
    Permission,
    Principal,
    TooManyRequests,
    Unauthenticated,
)
from gpu_platform.ports.inbound.access import AccessService
from gpu_platform.ports.inbound.model_routes import ModelRoute, ModelRoutes
from gpu_platform.ports.outbound.gateway_metrics import GatewayMetrics, NoGatewayMetrics

__all__ = ["GATEWAY_PATHS", "GatewaySettings", "OpenAiGateway"]

GATEWAY_PATHS = frozenset(
    {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models"}
)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    limits: LimitSettings = field(default_factory=LimitSettings)
    retries: int = 2  # further replicas to try after a refused connection
    max_body_bytes: int = 16 << 20
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 600.0  # between two chunks of an answer
    max_connections: int = 1000  # idle keep-alive connections kept per replica
    session_header: str = "x-session-id"
    auth_cache_s: float = 5.0
    eject_s: float = 2.0


class OpenAiGateway:
    """Starlette middleware: ``app.add_middleware(OpenAiGateway, routes=..., access=...)``."""

    def __init__(
        self,
        app: App,
        *,
        routes: ModelRoutes,
        access: AccessService,
        settings: GatewaySettings | None = None,
        metrics: GatewayMetrics | None = None,
        ledger: ServingLedger | None = None,
    ) -> None:
        self.app = app
        self.routes = routes
        self.access = access
        self.settings = settings or GatewaySettings()
        self.metrics = metrics or NoGatewayMetrics()
        self.ledger = ledger or ServingLedger()
        self.limits = GatewayLimits(self.settings.limits)
        self._session_header = self.settings.session_header.lower().encode()
        self._keys: dict[bytes, tuple[Principal, float]] = {}
        self._relay: Relay | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in GATEWAY_PATHS:
            await self._serve(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self.app(scope, self._closing(receive), send)
        else:
            await self.app(scope, receive, send)

    def _closing(self, receive: Receive) -> Receive:
        async def wrapped() -> dict[str, Any]:
            message = await receive()
            if message["type"] == "lifespan.shutdown" and self._relay is not None:
                relay, self._relay = self._relay, None
                await relay.pool.aclose()
            return message

        return wrapped

    def relay(self) -> Relay:
        """The relay, made on first use inside the server's event loop."""
        if self._relay is None:
            s = self.settings
            pool = UpstreamPool(
                connect_timeout_s=s.connect_timeout_s,
                read_timeout_s=s.read_timeout_s,
                max_idle=s.max_connections,
            )
            self._relay = Relay(pool, ReplicaBalancer(s.eject_s), s.retries)
        return self._relay

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        model, tenant, status = "", "", 500
        try:
            authorization = session = None
            for name, value in scope["headers"]:
                if name == b"authorization":
                    authorization = value
                elif name == self._session_header:
                    session = value
            client = scope.get("client")
            who = await self._principal(authorization, client[0] if client else "")
            tenant = who.tenant
            if scope["path"] == "/v1/models":
                if scope["method"] != "GET":
                    raise GatewayError(405, "method_not_allowed", "use GET /v1/models")
                status = 200
                await send_json(send, 200, self._models(who))
                return
            if scope["method"] != "POST":
                raise GatewayError(405, "method_not_allowed", f"use POST {scope['path']}")
            body = await self._body(receive)
            request, route = self._parse(body, who)
            model = route.model
            key = who.token_id or who.name
            wait = self.limits.admit(key, time.monotonic()) if self.limits.enabled else 0.0
            if wait > 0:
                raise GatewayError(
                    429, "rate_limit_exceeded", f"rate limit for key {key!r} reached", wait
                )
            stream = request.get("stream") is True
            outcome = Outcome()
            watcher = _watch_disconnect(receive, outcome)
            try:
                await self.relay().forward(
                    route,
                    scope["path"],
                    body,
                    send,
                    stream=stream,
                    session=session,
                    started=started,
                    outcome=outcome,
                )
            except asyncio.CancelledError:
                if not watcher.done() or outcome.complete:
                    raise
                _uncancel()
                status = 499  # the client went away: the replica's stream was closed
                return
            finally:
                watcher.cancel()
            status = outcome.status or 502
            if stream and outcome.first_byte_s is not None and outcome.status == 200:
                self.metrics.first_token(model, outcome.first_byte_s)
            used = outcome.prompt_tokens + outcome.completion_tokens
            if outcome.status == 200:
                self.ledger.record(route.tenant, outcome.prompt_tokens, outcome.completion_tokens)
                self.metrics.tokens(
                    model, route.tenant, outcome.prompt_tokens, outcome.completion_tokens
                )
                if used:
                    self.limits.charge(key, used, time.monotonic())
        except GatewayError as error:
            status = error.status
            await send_error(send, error)
        finally:
            self.metrics.request_done(model, tenant, status, time.perf_counter() - started)

    async def _principal(self, authorization: bytes | None, source: str) -> Principal:
        access = self.access
        if not access.enabled:
            return access.authenticate(None)
        if authorization is None or not authorization[:7].lower() == b"bearer ":
            raise GatewayError(
                401, "invalid_api_key", "an API key is required (Authorization: Bearer <key>)"
            )
        secret = authorization[7:].strip()
        now = time.monotonic()
        cached = self._keys.get(secret)
        if cached is not None and cached[1] > now:
            return cached[0]
        try:
            who = await anyio.to_thread.run_sync(
                access.authenticate, secret.decode("latin-1"), source
            )
        except Unauthenticated as exc:
            raise GatewayError(401, "invalid_api_key", str(exc)) from None
        except TooManyRequests as exc:  # too many bad keys from this address lately
            raise GatewayError(
                429, "rate_limit_exceeded", str(exc), retry_after_s=exc.retry_after_s
            ) from None
        if len(self._keys) >= 10000:
            self._keys.clear()
        self._keys[secret] = (who, now + self.settings.auth_cache_s)
        return who

    async def _body(self, receive: Receive) -> bytes:
        limit = self.settings.max_body_bytes
        message = await receive()
        body: bytes = message.get("body", b"")
        if not message.get("more_body", False):
            if len(body) > limit:
                raise _too_large(limit)
            return body  # the usual case: one message, no copy
        parts = [body]
        size = len(body)
        while message.get("more_body", False):
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            parts.append(chunk)
        return b"".join(parts)

    def _parse(self, body: bytes, who: Principal) -> tuple[dict[str, Any], ModelRoute]:
        try:
            request = json.loads(body)
        except ValueError as exc:
            raise GatewayError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
        if not isinstance(request, dict):
            raise GatewayError(400, "invalid_json", "the body must be a JSON object")
        name = request.get("model")
        if not isinstance(name, str) or not name:
            raise GatewayError(400, "missing_model", "field 'model': a model name is required")
        stream = request.get("stream", False)
        if stream is not None and not isinstance(stream, bool):
            raise GatewayError(400, "invalid_field", "field 'stream': must be true or false")
        route = self.routes.routes().get(name)
        if route is None or not _may_reach(who, route):
            raise GatewayError(404, "model_not_found", f"the model {name!r} does not exist")
        return request, route

    def _models(self, who: Principal) -> dict[str, Any]:
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": route.tenant}
            for name, route in sorted(self.routes.routes().items())
            if _may_reach(who, route)
        ]
        return {"object": "list", "data": data}


def _watch_disconnect(receive: Receive, outcome: Outcome) -> asyncio.Task[None]:
    """A task that cancels the current one if the client disconnects before the answer is
    complete: the replica's connection is closed, so it stops generating for nobody."""
    task = asyncio.current_task()
    assert task is not None

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if not outcome.complete:  # (after the answer, servers report a disconnect too)
            task.cancel()

    return asyncio.create_task(watch())


def _uncancel() -> None:
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


def _may_reach(who: Principal, route: ModelRoute) -> bool:
    return route.tenant == who.tenant or who.may(Permission.JOBS_ANY_TENANT)


def _too_large(limit: int) -> GatewayError:
    return GatewayError(413, "request_too_large", f"the body is larger than {limit} bytes")
