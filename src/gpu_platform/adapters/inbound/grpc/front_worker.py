"""An API worker (docs/operations.md, "API workers"): a process that serves the public gRPC
port beside its siblings (SO_REUSEPORT: the kernel spreads connections over them) and hands
the calls to the server over its Unix sockets.

SubmitJob calls are not parsed here: their bytes, metadata, address and deadline queue up and
go to the server as one frame over the front link (front_link.py) while the previous batch is
answered, so the server pays no gRPC call for them at all. Every other method is relayed call
for call, bytes for bytes (unary, server-streaming and bidirectional), with the client's
metadata, deadline, status, details and trailing metadata. Member certificates (a server's or
an agent's) are refused here, as the server refuses them on a direct call.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import structlog
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2  # noqa: F401  (the methods' descriptors)
from grpc_reflection.v1alpha import reflection_pb2  # noqa: F401

from gpu_platform.adapters.inbound.grpc.front_codec import (
    Answer,
    Item,
    Pairs,
    decode_answers,
    encode_items,
)
from gpu_platform.adapters.inbound.grpc.front_core import PEER_METADATA, SUBMIT_JOB
from gpu_platform.adapters.inbound.grpc.front_link import BatchLink
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2  # noqa: F401
from gpu_platform.adapters.member_gate import client_certificate_refusal

__all__ = ["Batcher", "WorkerHandler", "forwarded_metadata"]

log = structlog.get_logger(__name__)

_OPEN = ("/grpc.health.v1.Health/", "/grpc.reflection.")
MAX_BATCH = 256


def forwarded_metadata(context: grpc.ServicerContext) -> Pairs:
    """The client's metadata as the server should see it: text keys only (grpc's own and
    binary ones stay here), a client's own `x-gpu-platform-peer` dropped, this call's added."""
    kept = tuple(
        (k, v)
        for k, v in context.invocation_metadata() or ()
        if isinstance(v, str) and not k.startswith((":", "grpc-")) and k != PEER_METADATA
    )
    return (*kept, (PEER_METADATA, str(context.peer() or "")))


_NO_DEADLINE_S = 1e8  # grpc answers a call without a deadline with its "infinite future"


def _time_left(context: grpc.ServicerContext) -> float | None:
    left = context.time_remaining()
    if left is None or left > _NO_DEADLINE_S:
        return None
    return max(0.0, float(left))


def _abort(
    context: grpc.ServicerContext, code: grpc.StatusCode, details: str, trailing: Any
) -> None:
    if trailing:
        context.set_trailing_metadata(tuple(trailing))
    context.abort(code, details)


_CODES = {c.value[0]: c for c in grpc.StatusCode}


class _Call:
    """One SubmitJob call in the Batcher: queued, then sent (in some sender's batch), then
    answered. `wake` is set when it is answered or handed a link."""

    __slots__ = ("answer", "done", "item", "link", "sent", "wake")

    def __init__(self, item: Item) -> None:
        self.item = item
        self.sent = False
        self.answer: Answer | None = None
        self.link: BatchLink | None = None
        self.wake = threading.Event()
        self.done = threading.Event()


class Batcher:
    """SubmitJob calls on their way to the server, over `links` front link connections to
    `path`. The calling threads send for each other: a caller that finds a link free takes it
    and sends everything queued as one batch (at most MAX_BATCH) until its own call has gone;
    it then hands the link to a caller still queued, if any. So batches grow with the load, a
    lone call is sent by its own thread, and each caller is woken once for its answer."""

    def __init__(self, path: str, links: int = 2) -> None:
        self._free = [BatchLink(path) for _ in range(links)]
        self._all = list(self._free)
        self._queue: list[_Call] = []
        self._waiting: collections.deque[_Call] = collections.deque()
        self._lock = threading.Lock()
        self._closed = False

    def call(self, item: Item) -> Answer:
        me = _Call(item)
        with self._lock:
            if self._closed:
                raise RuntimeError("API worker is stopping")
            self._queue.append(me)
            if self._free:
                me.link = self._free.pop()
            else:
                self._waiting.append(me)
        if me.link is None:
            me.wake.wait()
        link, me.link = me.link, None
        if link is not None:
            try:
                while not me.sent and self._send_queued(link):
                    pass
            finally:
                self._hand_over(link)
        me.done.wait()
        assert me.answer is not None
        return me.answer

    def close(self) -> None:
        with self._lock:
            self._closed = True
        for link in self._all:
            link.close()

    def _send_queued(self, link: BatchLink) -> bool:
        with self._lock:
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            for c in batch:
                c.sent = True
        if not batch:
            return False
        answers = self._send(link, [c.item for c in batch])
        for c, answer in zip(batch, answers, strict=True):
            c.answer = answer
            c.done.set()
            c.wake.set()
        return True

    @staticmethod
    def _send(link: BatchLink, items: list[Item]) -> list[Answer]:
        """The server's answers to `items`, or the same failure for each."""
        lefts = [i.time_left_s for i in items if i.time_left_s >= 0]
        timeout = max(lefts) + 1.0 if len(lefts) == len(items) else None
        try:
            answers = decode_answers(link.call(encode_items(items), timeout))
            if len(answers) != len(items):
                raise ValueError(f"{len(answers)} answers to {len(items)} calls")
            return answers
        except TimeoutError:
            code = grpc.StatusCode.DEADLINE_EXCEEDED
            detail = "the server behind this API worker did not answer in time"
        except OSError as exc:
            code = grpc.StatusCode.UNAVAILABLE
            detail = f"the server behind this API worker did not answer: {exc}"
        except ValueError as exc:
            log.error("front link answer unreadable", error=str(exc))
            code, detail = grpc.StatusCode.INTERNAL, str(exc)
        return [Answer(code.value[0], detail, (), b"")] * len(items)

    def _hand_over(self, link: BatchLink) -> None:
        with self._lock:
            while self._waiting:
                c = self._waiting.popleft()
                if not c.sent:  # still queued: it sends next
                    c.link = link
                    c.wake.set()
                    return
            self._free.append(link)


class WorkerHandler(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Every method of the public port: SubmitJob batched, the rest relayed."""

    def __init__(self, channel: grpc.Channel, batcher: Batcher) -> None:
        self._channel = channel
        self._batcher = batcher
        self._handlers: dict[str, grpc.RpcMethodHandler | None] = {}
        self._pool = descriptor_pool.Default()

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        method = handler_call_details.method
        if method not in self._handlers:
            self._handlers[method] = self._make(method)
        return self._handlers[method]

    def _make(self, method: str) -> grpc.RpcMethodHandler | None:
        if method == SUBMIT_JOB:
            return grpc.unary_unary_rpc_method_handler(self._submit)
        service, _, name = method.lstrip("/").rpartition("/")
        try:
            found = self._pool.FindMethodByName(f"{service}.{name}")
        except KeyError:
            return None  # UNIMPLEMENTED, as the server answers it
        gate = _gate(method)
        if found.client_streaming and found.server_streaming:
            return grpc.stream_stream_rpc_method_handler(
                gate(_relay_streams(self._channel.stream_stream(method)))
            )
        if found.server_streaming:
            return grpc.unary_stream_rpc_method_handler(
                gate(_relay_stream(self._channel.unary_stream(method)))
            )
        if found.client_streaming:
            return None  # no client-streaming methods in this API
        return grpc.unary_unary_rpc_method_handler(
            gate(_relay_unary(self._channel.unary_unary(method)))
        )

    def _submit(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        refused = client_certificate_refusal(context)
        if refused:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, refused)
        left = _time_left(context)
        item = Item(
            tuple(forwarded_metadata(context)[:-1]),  # the peer travels in the item
            str(context.peer() or ""),
            -1.0 if left is None else left,
            request,
        )
        try:
            answer = self._batcher.call(item)
        except RuntimeError as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
            raise AssertionError("unreachable") from None  # pragma: no cover
        if answer.code:
            code = _CODES.get(answer.code, grpc.StatusCode.UNKNOWN)
            _abort(context, code, answer.details, answer.trailing)
        if answer.trailing:
            context.set_trailing_metadata(answer.trailing)
        return answer.response


Handler = Callable[[Any, grpc.ServicerContext], Any]


def _gate(method: str) -> Callable[[Handler], Handler]:
    """Refuse member certificates first, as the server's AuthInterceptor does."""
    if method.startswith(_OPEN):
        return lambda handler: handler

    def wrap(handler: Handler) -> Handler:
        def gated(request: Any, context: grpc.ServicerContext) -> Any:
            refused = client_certificate_refusal(context)
            if refused:
                context.abort(grpc.StatusCode.PERMISSION_DENIED, refused)
            return handler(request, context)

        return gated

    return wrap


def _relay_unary(call: grpc.UnaryUnaryMultiCallable) -> Handler:
    def relay(request: bytes, context: grpc.ServicerContext) -> bytes:
        try:
            response, outcome = call.with_call(
                request, metadata=forwarded_metadata(context), timeout=_time_left(context)
            )
        except grpc.RpcError as exc:
            _relay_error(context, exc)
            raise AssertionError("unreachable") from None  # pragma: no cover
        trailing = outcome.trailing_metadata()
        if trailing:
            context.set_trailing_metadata(tuple(trailing))
        return bytes(response)

    return relay


def _relay_stream(call: grpc.UnaryStreamMultiCallable) -> Handler:
    def relay(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        upstream = call(request, metadata=forwarded_metadata(context), timeout=_time_left(context))
        context.add_callback(upstream.cancel)  # the client went away: so does the relay
        yield from _drain(upstream, context)

    return relay


def _relay_streams(call: grpc.StreamStreamMultiCallable) -> Handler:
    def relay(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        upstream = call(requests, metadata=forwarded_metadata(context), timeout=_time_left(context))
        context.add_callback(upstream.cancel)
        yield from _drain(upstream, context)

    return relay


def _drain(upstream: Any, context: grpc.ServicerContext) -> Iterator[bytes]:
    try:
        yield from upstream
    except grpc.RpcError as exc:
        if exc.code() is grpc.StatusCode.CANCELLED and not context.is_active():
            return
        _relay_error(context, exc)
    trailing = upstream.trailing_metadata()
    if trailing:
        context.set_trailing_metadata(tuple(trailing))


def _relay_error(context: grpc.ServicerContext, exc: grpc.RpcError) -> None:
    if not isinstance(exc, grpc.Call):
        context.abort(grpc.StatusCode.UNAVAILABLE, "the server behind this API worker failed")
    _abort(context, exc.code(), exc.details() or "", exc.trailing_metadata())
