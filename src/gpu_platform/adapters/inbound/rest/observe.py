"""Request tracing and request metrics as plain ASGI middleware (issue 21).

Starlette's `@app.middleware("http")` (BaseHTTPMiddleware) runs the rest of the app in a task
of its own and relays the response through memory streams: on the submit path that cost more
CPU than the route itself. These two wrap `send` instead and add nothing else per request.

- `TraceRequests`: one server span per HTTP request, `"{method} {path}"`, a child of the
  caller's W3C `traceparent` when there is one; attributes `http.request.method`, `url.path`
  and `http.response.status_code`. The span is current while the route runs, so the spans
  and log lines the request causes join its trace.
- `MeasureRequests`: `ApiMetrics.http_request(method, route template, status, seconds)` per
  request; the time runs to the response headers (a streamed body is not waited for); a
  request that fails before any response counts as 500; an unmatched path as "unmatched".
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from opentelemetry.trace import Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gpu_platform.adapters.otel_spans import current_span
from gpu_platform.ports.outbound.metrics import ApiMetrics

__all__ = ["MeasureRequests", "TraceRequests"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_PROPAGATOR = TraceContextTextMapPropagator()


class TraceRequests:
    """ASGI middleware: a span per HTTP request (module docstring)."""

    def __init__(self, app: App, tracer: Tracer) -> None:
        self.app = app
        self.tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        method, path = scope["method"], scope["path"]
        parent = _PROPAGATOR.extract(carrier)
        with current_span(self.tracer, f"{method} {path}", parent) as span:
            span.set_attribute("http.request.method", method)
            span.set_attribute("url.path", path)

            async def traced(message: Message) -> None:
                if message["type"] == "http.response.start":
                    span.set_attribute("http.response.status_code", message["status"])
                await send(message)

            await self.app(scope, receive, traced)


class MeasureRequests:
    """ASGI middleware: request latency by method, route template and status."""

    def __init__(self, app: App, observe: ApiMetrics) -> None:
        self.app = app
        self.observe = observe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        seen = False

        def record(status: int) -> None:
            # the template of the route the router chose (it sets scope["route"])
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            took = time.perf_counter() - started
            self.observe.http_request(scope["method"], route, status, took)

        async def measured(message: Message) -> None:
            nonlocal seen
            if message["type"] == "http.response.start" and not seen:
                seen = True
                record(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, measured)
        finally:
            if not seen:
                record(500)
