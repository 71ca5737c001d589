"""The server's side of its API workers (docs/operations.md, "API workers").

A worker takes clients' SubmitJob calls off the public port and hands them here in batches
over the front link (front_link.py: the data directory's `submit.sock`). Each item runs
through the same handler chain a direct call does (metrics, tracing, authentication and rate
limits, the servicer, the audit trail), with a context that answers from the item: the
client's metadata, address and deadline. The items of a batch run together on the thread that
took it (`together.run_together`: one group commit, no thread wake-up per item).

Calls the workers relay come over the server's gRPC Unix socket; only callers there may name
the client's address in `x-gpu-platform-peer` (`forwarded_peer`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import grpc
import structlog

from gpu_platform.adapters.inbound.grpc.front_codec import (
    Answer,
    Item,
    Pairs,
    decode_items,
    encode_answers,
)
from gpu_platform.adapters.inbound.together import run_together

__all__ = ["PEER_METADATA", "SUBMIT_JOB", "ItemContext", "SubmitItems", "forwarded_peer"]

log = structlog.get_logger(__name__)

SUBMIT_JOB = "/gpu_platform.v1.JobService/SubmitJob"
PEER_METADATA = "x-gpu-platform-peer"


def forwarded_peer(context: grpc.ServicerContext) -> str:
    """The client's address: the one an API worker forwarded, on the Unix socket; else the
    connection's own."""
    peer = str(context.peer() or "")
    if peer.startswith("unix:"):
        for key, value in context.invocation_metadata() or ():
            if key == PEER_METADATA and isinstance(value, str):
                return value
    return peer


class _Aborted(Exception):
    pass


class _Details(NamedTuple):
    method: str
    invocation_metadata: Pairs


class ItemContext:
    """The parts of grpc.ServicerContext the submit chain uses, answered from one item."""

    def __init__(self, item: Item) -> None:
        self._item = item
        self._deadline = None if item.time_left_s < 0 else time.monotonic() + item.time_left_s
        self.status: grpc.StatusCode | None = None
        self.details = ""
        self.trailing: Pairs = ()

    def invocation_metadata(self) -> Pairs:
        return self._item.metadata

    def peer(self) -> str:
        return self._item.peer

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else self._deadline - time.monotonic()

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}  # the worker refused member certificates before forwarding

    def is_active(self) -> bool:
        return True

    def set_trailing_metadata(self, metadata: Sequence[tuple[str, str]]) -> None:
        self.trailing = tuple((str(k), str(v)) for k, v in metadata)

    def set_code(self, code: grpc.StatusCode) -> None:
        self.status = code

    def set_details(self, details: str) -> None:
        self.details = details

    def code(self) -> grpc.StatusCode | None:
        return self.status

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.status, self.details = code, details
        raise _Aborted


def _chain(
    handler: grpc.RpcMethodHandler, interceptors: Sequence[grpc.ServerInterceptor]
) -> grpc.RpcMethodHandler:
    """`handler` wrapped by `interceptors` as grpc wraps it (the first one outermost)."""
    details = _Details(SUBMIT_JOB, ())
    for interceptor in reversed(interceptors):
        inner = handler
        wrapped = interceptor.intercept_service(lambda _d, h=inner: h, details)
        handler = wrapped if wrapped is not None else inner
    return handler


def _failed(exc: Exception) -> Answer:
    return Answer(
        grpc.StatusCode.UNKNOWN.value[0], f"Exception calling application: {exc}", (), b""
    )


class SubmitItems:
    """The batches of the front link (front_link.BatchListener's `handle`). `submit_job` is
    the servicer's SubmitJob and `interceptors` the server's, in its order."""

    def __init__(
        self,
        submit_job: Callable[[Any, Any], Any],
        request_from: Callable[[bytes], Any],
        response_to: Callable[[Any], bytes],
        interceptors: Sequence[grpc.ServerInterceptor],
    ) -> None:
        plain = grpc.unary_unary_rpc_method_handler(submit_job)
        self._unary = _chain(plain, interceptors).unary_unary
        self._request_from = request_from
        self._response_to = response_to

    def close(self) -> None:
        pass  # nothing of its own to stop: batches run on the listener's threads

    def batch(self, frame: bytes) -> bytes:
        """The answers to a frame of items (ValueError: the frame does not parse), the items
        run together on this thread (the module docstring)."""
        items = decode_items(frame)
        answers = run_together([partial(self.one, item) for item in items])
        return encode_answers([a if isinstance(a, Answer) else _failed(a) for a in answers])

    def one(self, item: Item) -> Answer:
        """One SubmitJob call, as the server would answer it directly."""
        ctx = ItemContext(item)
        try:
            request = self._request_from(item.request)
        except Exception:
            return Answer(grpc.StatusCode.INTERNAL.value[0], "could not parse the request", (), b"")
        try:
            response = self._unary(request, ctx)
        except _Aborted:
            code = ctx.status or grpc.StatusCode.UNKNOWN
            return Answer(code.value[0], ctx.details, ctx.trailing, b"")
        except Exception as exc:  # as grpc answers an exception a handler raised
            log.exception("SubmitJob through an API worker failed")
            details = f"Exception calling application: {exc}"
            return Answer(grpc.StatusCode.UNKNOWN.value[0], details, ctx.trailing, b"")
        return Answer(0, "", ctx.trailing, self._response_to(response))
