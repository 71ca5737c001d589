"""gRPC server interceptors: one OpenTelemetry span and one latency/status sample per unary
RPC (streams are left alone: they last as long as the client wants).

grpc asks every interceptor for a handler on every call; each wraps the handler it is given
once (`WrappedHandlers`) and hands back the same wrapping while it is given the same handler.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
from opentelemetry.trace import Span, Status, StatusCode, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gpu_platform.adapters.otel_spans import current_span
from gpu_platform.ports.outbound.metrics import ApiMetrics

__all__ = ["MetricsInterceptor", "TracingInterceptor", "WrappedHandlers"]

_PROPAGATOR = TraceContextTextMapPropagator()


class WrappedHandlers:
    """An interceptor's wrappings, made once per (method, inner handler). The inner handler
    is kept with its wrapping, so its id is not reused while the entry lives; at most
    `limit` entries (a server has a fixed set of methods)."""

    def __init__(self, limit: int = 1024) -> None:
        self._by_key: dict[tuple[str, int], tuple[grpc.RpcMethodHandler, Any]] = {}
        self._limit = limit

    def get(
        self,
        method: str,
        handler: grpc.RpcMethodHandler,
        wrap: Callable[[str, grpc.RpcMethodHandler], grpc.RpcMethodHandler],
    ) -> grpc.RpcMethodHandler:
        key = (method, id(handler))
        hit = self._by_key.get(key)
        if hit is not None and hit[0] is handler:
            return hit[1]
        wrapped = wrap(method, handler)
        if len(self._by_key) < self._limit:
            self._by_key[key] = (handler, wrapped)
        return wrapped


class TracingInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    """One OpenTelemetry span per unary RPC, named after its method
    (e.g. /gpu_platform.v1.JobService/GetJob); a `traceparent` in the call's metadata makes it
    a child of the caller's span."""

    def __init__(self, tracer_provider: TracerProvider) -> None:
        self._tracer = tracer_provider.get_tracer("gpu_platform.grpc")
        self._wrapped = WrappedHandlers()

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler  # streams are left untraced: a span per event would be noise
        return self._wrapped.get(handler_call_details.method, handler, self._wrap)

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        inner = handler.unary_unary

        def traced(request: Any, context: grpc.ServicerContext) -> Any:
            parent = _PROPAGATOR.extract(dict(context.invocation_metadata()))
            with current_span(self._tracer, method, parent, on_exception=False) as span:
                span.set_attribute("rpc.system", "grpc")
                span.set_attribute("rpc.method", method)
                try:
                    return inner(request, context)
                except Exception as exc:
                    _failed(span, context.code(), exc)
                    raise

        return grpc.unary_unary_rpc_method_handler(
            traced,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _failed(span: Span, code: object, exc: Exception) -> None:
    """An answer the handler chose (`context.abort`: a status code is set) is the span's status
    and code, not an exception: a refused call costs no formatted traceback (a new leader's
    refusals were 30 % of its GIL time); anything else is recorded as an exception too."""
    if not span.is_recording():
        return
    if isinstance(code, grpc.StatusCode) and code is not grpc.StatusCode.OK:
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        span.set_status(Status(StatusCode.ERROR, code.name))
        return
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


class MetricsInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    """Reports each unary RPC's latency and status code to ApiMetrics."""

    def __init__(self, metrics: ApiMetrics) -> None:
        self._metrics = metrics
        self._wrapped = WrappedHandlers()

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler  # streams (WatchJobs) last as long as the client wants
        return self._wrapped.get(handler_call_details.method, handler, self._wrap)

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        inner = handler.unary_unary

        def measured(request: Any, context: grpc.ServicerContext) -> Any:
            started, failed = time.perf_counter(), True
            try:
                response = inner(request, context)
                failed = False
                return response
            finally:
                code = context.code() or (grpc.StatusCode.UNKNOWN if failed else grpc.StatusCode.OK)
                name = code.name if isinstance(code, grpc.StatusCode) else str(code)
                self._metrics.grpc_call(method, name, time.perf_counter() - started)

        return grpc.unary_unary_rpc_method_handler(
            measured,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
