"""The server's side of its API workers (docs/operations.md, "API workers").

A worker takes clients' SubmitJob calls off the public port and hands them here in batches
over the front link (front_link.py: the data directory's `submit.sock`). Each item runs
through the same handler chain a direct call does (metrics, tracing, authentication and rate
limits, the servicer, the audit trail), with a context that answers from the item: the
client's metadata, address and deadline. The items of a batch run on the thread that took the
batch, each in a greenlet of its own: an item that reaches its commit parks (`settling_with`),
the next one runs, and once every item has parked or answered the thread drives one group
commit for all of them and resumes each in turn. No item waits on another thread: a batch of 64
costs no thread wake-ups, where a pool of threads cost ~3 per item.

Calls the workers relay come over the server's gRPC Unix socket; only callers there may name
the client's address in `x-gpu-platform-peer` (`forwarded_peer`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, NamedTuple

import grpc
import structlog
from greenlet import GreenletExit, getcurrent, greenlet

from gpu_platform.adapters.inbound.grpc.front_codec import (
    Answer,
    Item,
    Pairs,
    decode_items,
    encode_answers,
)
from gpu_platform.application.control.commands import settle_here, settling_with

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
        return encode_answers(_Batch(self.one).run(items))

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


class _Park(NamedTuple):
    futures: Sequence[Future[object]]
    drive: Callable[[], None]


class _Batch:
    """One batch's items, each in a greenlet whose parent is the calling thread's (the hub)."""

    def __init__(self, one: Callable[[Item], Answer]) -> None:
        self._one = one
        self._hub = getcurrent()
        self._parked: list[tuple[int, greenlet, _Park]] = []

    def _settle(self, futures: Sequence[Future[object]], drive: Callable[[], None]) -> None:
        """An item's commit: park until the hub has driven and waited for it."""
        me = getcurrent()
        if me is self._hub or me.parent is not self._hub:
            settle_here(futures, drive)  # not one of this batch's items
            return
        self._hub.switch(_Park(futures, drive))

    def run(self, items: Sequence[Item]) -> list[Answer]:
        answers: list[Answer | None] = [None] * len(items)
        runners = [greenlet(self._one) for _ in items]
        with settling_with(self._settle):
            try:
                for i, (runner, item) in enumerate(zip(runners, items, strict=True)):
                    self._step(i, runner, runner.switch(item), answers)
                while self._parked:
                    parked, self._parked = self._parked, []
                    parked[0][2].drive()  # every item proposed with driven=True: one drive
                    for _, _, park in parked:
                        settle_here(park.futures, lambda: None)
                    for i, runner, _ in parked:
                        self._step(i, runner, runner.switch(), answers)
            finally:  # when the hub failed: end the items not done (their finally blocks run)
                for runner in runners:
                    if not runner.dead:
                        runner.throw(GreenletExit)
        done = [a for a in answers if a is not None]
        assert len(done) == len(items)
        return done

    def _step(self, i: int, runner: greenlet, out: object, answers: list[Answer | None]) -> None:
        if isinstance(out, _Park):
            self._parked.append((i, runner, out))
        else:
            assert isinstance(out, Answer) and runner.dead
            answers[i] = out
