"""The tracing interceptor over a real gRPC server: a call the handler refused
(`context.abort`) gets the span's status and gRPC code, no exception event (no traceback
formatted per refusal); an unexpected exception is still recorded."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from gpu_platform.adapters.inbound.grpc.interceptors import TracingInterceptor


def _refuse(request: bytes, context: grpc.ServicerContext) -> bytes:
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "gpus: must be at least 1")
    raise AssertionError("abort returns by raising")


def _crash(request: bytes, context: grpc.ServicerContext) -> bytes:
    raise RuntimeError("a bug")


def _echo(request: bytes, context: grpc.ServicerContext) -> bytes:
    return request


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[grpc.Channel, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=2), interceptors=[TracingInterceptor(provider)]
    )
    methods = {"Refuse": _refuse, "Crash": _crash, "Echo": _echo}
    handlers = {name: grpc.unary_unary_rpc_method_handler(fn) for name, fn in methods.items()}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.S", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield channel, exporter
    channel.close()
    server.stop(None)


def _call(served: tuple[grpc.Channel, InMemorySpanExporter], method: str) -> ReadableSpan:
    channel, exporter = served
    exporter.clear()
    call: Any = channel.unary_unary(f"/t.S/{method}")
    with contextlib.suppress(grpc.RpcError):
        call(b"x", timeout=10)
    (span,) = exporter.get_finished_spans()
    assert span.name == f"/t.S/{method}"
    return span


def test_a_refused_call_has_its_grpc_code_as_status_and_no_exception_event(
    served: tuple[grpc.Channel, InMemorySpanExporter],
) -> None:
    span = _call(served, "Refuse")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "INVALID_ARGUMENT"
    assert span.attributes is not None
    assert span.attributes["rpc.grpc.status_code"] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert [e.name for e in span.events] == []


def test_an_unexpected_exception_is_recorded_with_its_traceback(
    served: tuple[grpc.Channel, InMemorySpanExporter],
) -> None:
    span = _call(served, "Crash")
    assert span.status.status_code is StatusCode.ERROR
    (event,) = span.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert "RuntimeError" in str(event.attributes["exception.type"])
    assert "a bug" in str(event.attributes["exception.stacktrace"])


def test_a_call_that_succeeds_has_no_error(
    served: tuple[grpc.Channel, InMemorySpanExporter],
) -> None:
    span = _call(served, "Echo")
    assert span.status.status_code is StatusCode.UNSET
    assert list(span.events) == []
