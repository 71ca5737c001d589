"""Spans with no span processor (adapters/otel_spans.py, the gRPC interceptors' wrappings, the
job tracer): the ids a caller and a job's task see are the ones the SDK would give, nothing
is built that no exporter would receive, and a processor added later gets every span again."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gpu_platform.adapters.inbound.grpc.interceptors import WrappedHandlers
from gpu_platform.adapters.otel_spans import current_span, exporting
from gpu_platform.adapters.outbound.observability import OtelJobTracer
from gpu_platform.domain.events import JobStarted, JobSubmitted

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


def _caller(flags: str) -> Context:
    return TraceContextTextMapPropagator().extract(
        {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-{flags}"}
    )


@pytest.mark.parametrize("flags", ["01", "00"])
def test_without_a_processor_the_span_continues_the_callers_trace_as_the_sdk_would(
    flags: str,
) -> None:
    provider = TracerProvider()
    tracer = provider.get_tracer("test")
    assert not exporting(tracer)
    with current_span(tracer, "call", _caller(flags)) as span:
        ours = span.get_span_context()
        assert get_current_span() is span
        assert not span.is_recording()
    with tracer.start_as_current_span("call", context=_caller(flags)) as sdk_span:
        sdk = sdk_span.get_span_context()
    assert format(ours.trace_id, "032x") == CALLER_TRACE == format(sdk.trace_id, "032x")
    assert ours.trace_flags == sdk.trace_flags == int(flags, 16)
    assert ours.span_id not in (0, int(CALLER_SPAN, 16))


def test_without_a_processor_or_caller_each_span_starts_a_sampled_trace() -> None:
    tracer = TracerProvider().get_tracer("test")
    with current_span(tracer, "a", None) as a, current_span(tracer, "b", Context()) as b:
        first, second = a.get_span_context(), b.get_span_context()
    assert first.is_valid and second.is_valid
    assert first.trace_flags.sampled and second.trace_flags.sampled
    assert first.trace_id != second.trace_id


def test_a_processor_added_later_receives_the_sdks_spans() -> None:
    provider = TracerProvider()
    tracer = provider.get_tracer("test")
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert exporting(tracer)
    with current_span(tracer, "call", _caller("01")) as span:
        assert span.is_recording()
    (done,) = exporter.get_finished_spans()
    assert done.name == "call" and format(done.context.trace_id, "032x") == CALLER_TRACE


def test_another_sampler_than_the_default_keeps_the_sdks_spans() -> None:
    tracer = TracerProvider(sampler=ALWAYS_ON).get_tracer("test")
    with current_span(tracer, "call", _caller("00")) as span:
        assert span.is_recording()  # ALWAYS_ON samples a child of an unsampled caller


def test_a_jobs_traceparent_joins_the_api_call_and_steps_reach_a_later_processor() -> None:
    provider = TracerProvider()
    jobs = OtelJobTracer(provider)
    with current_span(provider.get_tracer("api"), "SubmitJob", _caller("01")):
        jobs.publish(JobSubmitted("j1", 0))
    traceparent = jobs.traceparent("j1")
    assert traceparent is not None and traceparent.split("-")[1] == CALLER_TRACE
    assert jobs.trace_id("j1") == CALLER_TRACE
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    jobs.publish(JobStarted("j1", 1))
    (start,) = exporter.get_finished_spans()
    assert start.name == "job.start" and format(start.context.trace_id, "032x") == CALLER_TRACE
    assert (
        start.parent is not None
        and format(start.parent.span_id, "016x") == (traceparent.split("-")[2])
    )


def _handler(fn: Any) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(fn)


def test_an_interceptor_wraps_a_handler_once_and_a_new_handler_again() -> None:
    wrapped, made = WrappedHandlers(limit=2), []

    def wrap(method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        made.append(method)
        return _handler(handler.unary_unary)

    first, second = _handler(lambda r, c: 1), _handler(lambda r, c: 2)
    one = wrapped.get("/a", first, wrap)
    assert wrapped.get("/a", first, wrap) is one
    assert wrapped.get("/b", second, wrap) is not one
    assert wrapped.get("/b", second, wrap) is wrapped.get("/b", second, wrap)
    assert made == ["/a", "/b"]
    third = _handler(lambda r, c: 3)
    assert wrapped.get("/c", third, wrap).unary_unary is third.unary_unary  # over the limit
    assert wrapped.get("/c", third, wrap) is not wrapped.get("/c", third, wrap)
    assert made == ["/a", "/b", "/c", "/c", "/c"]


@pytest.mark.parametrize("flags", ["01", "00"])
def test_without_a_processor_a_jobs_traceparent_is_a_child_of_the_callers_span_with_its_flags(
    flags: str,
) -> None:
    provider = TracerProvider()
    jobs = OtelJobTracer(provider)
    with current_span(provider.get_tracer("api"), "SubmitJob", _caller(flags)) as api:
        jobs.publish(JobSubmitted("j1", 0))
    version, trace, span, job_flags = (jobs.traceparent("j1") or "").split("-")
    assert (version, trace, job_flags) == ("00", CALLER_TRACE, flags)
    assert len(span) == 16 and span not in (
        CALLER_SPAN,
        format(api.get_span_context().span_id, "016x"),
    )
    parsed = get_current_span(
        TraceContextTextMapPropagator().extract({"traceparent": jobs.traceparent("j1") or ""})
    )
    assert parsed.get_span_context().is_valid


def test_without_a_processor_or_caller_a_job_starts_its_own_sampled_trace() -> None:
    jobs = OtelJobTracer(TracerProvider())
    jobs.publish(JobSubmitted("j1", 0))
    jobs.publish(JobSubmitted("j2", 0))
    one, two = (jobs.traceparent(j) or "" for j in ("j1", "j2"))
    assert one.endswith("-01") and two.endswith("-01")
    assert one.split("-")[1] == jobs.trace_id("j1") != jobs.trace_id("j2")
