"""GatewayHandler: what the gateway does with one request, whichever server carried it.

The path of a proxied request: authenticate the key (cached), read the body, parse the JSON
once, look up the model, check the key's limits, then `Relay.forward`. Nothing on it blocks the
event loop: a key not in the cache is verified on a worker thread.

Authentication: `Authorization: Bearer <token>`, the same tokens as the REST API, checked by
the same `AccessService.authenticate` (with auth off every caller is the anonymous admin).
A verified key is trusted for `auth_cache_s` seconds, so a revoked token stops working within
that time. Tenancy: a caller reaches the models of its own tenant; operators and admins
(`jobs.any-tenant`) reach every model. Another tenant's model reads as unknown (404).

One handler belongs to one event loop (its relay's connection pool does).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread

from gpu_platform.adapters.inbound.gateway.errors import GatewayError
from gpu_platform.adapters.inbound.gateway.exchange import Exchange, send_error, send_json
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

__all__ = ["GATEWAY_PATHS", "GatewayHandler", "GatewaySettings"]

GATEWAY_PATHS = frozenset(
    {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models"}
)


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


class GatewayHandler:
    """Answers one gateway request (`handle`); the request's path is one of GATEWAY_PATHS."""

    def __init__(
        self,
        *,
        routes: ModelRoutes,
        access: AccessService,
        settings: GatewaySettings | None = None,
        metrics: GatewayMetrics | None = None,
        ledger: ServingLedger | None = None,
    ) -> None:
        self.routes = routes
        self.access = access
        self.settings = settings or GatewaySettings()
        self.metrics = metrics or NoGatewayMetrics()
        self.ledger = ledger or ServingLedger()
        self.limits = GatewayLimits(self.settings.limits)
        self.session_header = self.settings.session_header.lower().encode()
        self._keys: dict[bytes, tuple[Principal, float]] = {}
        self._relay: Relay | None = None

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

    async def aclose(self) -> None:
        """Close the idle upstream connections (in the server's event loop)."""
        if self._relay is not None:
            relay, self._relay = self._relay, None
            await relay.pool.aclose()

    async def handle(self, exchange: Exchange) -> None:
        started = time.perf_counter()
        model, tenant, status = "", "", 500
        try:
            who = await self._principal(exchange.authorization, exchange.client)
            tenant = who.tenant
            path = exchange.path
            if path == "/v1/models":
                if exchange.method != "GET":
                    raise GatewayError(405, "method_not_allowed", "use GET /v1/models")
                status = 200
                await send_json(exchange, 200, self._models(who))
                return
            if exchange.method != "POST":
                raise GatewayError(405, "method_not_allowed", f"use POST {path}")
            body = await exchange.body()
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
            exchange.watch(outcome)
            try:
                await self.relay().forward(
                    route,
                    path,
                    body,
                    exchange,
                    stream=stream,
                    session=exchange.session,
                    started=started,
                    outcome=outcome,
                )
            except asyncio.CancelledError:
                if not exchange.left() or outcome.complete:
                    raise
                _uncancel()
                status = 499  # the client went away: the replica's stream was closed
                return
            finally:
                exchange.unwatch()
            status = outcome.status or 502
            self._account(model, route.tenant, key, stream, outcome)
        except GatewayError as error:
            status = error.status
            await send_error(exchange, error)
        finally:
            self.metrics.request_done(model, tenant, status, time.perf_counter() - started)

    def _account(self, model: str, tenant: str, key: str, stream: bool, outcome: Outcome) -> None:
        if outcome.status != 200:
            return
        if stream and outcome.first_byte_s is not None:
            self.metrics.first_token(model, outcome.first_byte_s)
        self.ledger.record(tenant, outcome.prompt_tokens, outcome.completion_tokens)
        self.metrics.tokens(model, tenant, outcome.prompt_tokens, outcome.completion_tokens)
        used = outcome.prompt_tokens + outcome.completion_tokens
        if used:
            self.limits.charge(key, used, time.monotonic())

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


def too_large(limit: int) -> GatewayError:
    """The 413 an exchange raises from `body()`."""
    return GatewayError(413, "request_too_large", f"the body is larger than {limit} bytes")


def _uncancel() -> None:
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


def _may_reach(who: Principal, route: ModelRoute) -> bool:
    return route.tenant == who.tenant or who.may(Permission.JOBS_ANY_TENANT)
