"""gRPC authentication, rate limiting and deadlines, as one server interceptor.

Every call (health and reflection excepted) presents `authorization: Bearer <token>` metadata;
the AccessService turns it into a Principal (UNAUTHENTICATED if missing, unknown or revoked)
and takes one token from its rate-limit bucket (RESOURCE_EXHAUSTED, with the wait in the
`retry-after` trailing metadata, whole seconds, and `grpc-retry-pushback-ms`). A call whose
deadline has already passed when it reaches the server is answered DEADLINE_EXCEEDED without
running, so a late mutation is never carried out for a client that has given up. The
principal is handed to the servicers through a context variable (`current_principal()`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import grpc

from gpu_platform.adapters.inbound.grpc.front_core import forwarded_peer
from gpu_platform.adapters.inbound.grpc.interceptors import WrappedHandlers
from gpu_platform.adapters.member_gate import client_certificate_refusal
from gpu_platform.domain.model.tenancy import (
    ANONYMOUS_ADMIN,
    Forbidden,
    Principal,
    TooManyRequests,
    Unauthenticated,
)
from gpu_platform.ports.inbound.access import AccessService

__all__ = ["AuthInterceptor", "abort_access", "current_principal"]

_principal: ContextVar[Principal] = ContextVar("gpu_platform_principal", default=ANONYMOUS_ADMIN)
_OPEN = ("/grpc.health.v1.Health/", "/grpc.reflection.")


def current_principal() -> Principal:
    return _principal.get()


def abort_access(context: grpc.ServicerContext, exc: Exception) -> None:
    """Abort with the status an access error maps to (never returns)."""
    if isinstance(exc, Unauthenticated):
        context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
    if isinstance(exc, Forbidden):
        context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
    if isinstance(exc, TooManyRequests):
        seconds = max(1, math.ceil(exc.retry_after_s))
        context.set_trailing_metadata(
            (("retry-after", str(seconds)), ("grpc-retry-pushback-ms", str(seconds * 1000)))
        )
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
    raise exc


def _secret(context: grpc.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


def _source(context: grpc.ServicerContext) -> str:
    """The client's address without its port ("ipv4:10.0.0.1:5000" -> "ipv4:10.0.0.1"); through
    an API worker, the address it forwarded."""
    peer = forwarded_peer(context)
    host, sep, port = peer.rpartition(":")
    return host if sep and port.isdigit() else peer


def _actor(context: grpc.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "x-actor" and isinstance(value, str) and value:
            return value[:128]
    return "anonymous"


class AuthInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, access: AccessService, certificates: bool = True) -> None:
        """`certificates`: the port takes TLS, so a client may show a certificate (without
        it there is none to refuse, and reading each call's auth context is skipped)."""
        self._access = access
        self._certificates = certificates
        self._wrapped = WrappedHandlers()

    def _admit(self, context: grpc.ServicerContext) -> Principal:
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed before the call ran")
        # a server's or agent's certificate
        refused = client_certificate_refusal(context) if self._certificates else ""
        if refused:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, refused)
        try:
            who = self._access.authenticate(_secret(context), _source(context))
            self._access.admit(who)
        except (Unauthenticated, TooManyRequests) as exc:
            abort_access(context, exc)
            raise AssertionError("unreachable") from None  # pragma: no cover
        if not self._access.enabled:
            who = dataclasses.replace(who, name=_actor(context))
        return who

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(_OPEN):
            return handler
        return self._wrapped.get(handler_call_details.method, handler, self._wrap)

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        if handler.unary_unary is not None:
            unary = handler.unary_unary

            def checked_unary(request: Any, context: grpc.ServicerContext) -> Any:
                token = _principal.set(self._admit(context))
                try:
                    return unary(request, context)
                finally:
                    _principal.reset(token)

            return grpc.unary_unary_rpc_method_handler(
                checked_unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            stream = handler.unary_stream

            def checked_stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                _principal.set(self._admit(context))  # this generator's own context
                yield from stream(request, context)

            return grpc.unary_stream_rpc_method_handler(
                checked_stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # no client-streaming RPCs in this API
