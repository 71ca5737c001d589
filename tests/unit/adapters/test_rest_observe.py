"""The plain-ASGI request metrics and tracing middleware (rest/observe.py) on a real FastAPI
app (Starlette's TestClient drives it in-process)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gpu_platform.adapters.inbound.rest.observe import MeasureRequests, TraceRequests


class _Recorded:
    def __init__(self) -> None:
        self.http: list[tuple[str, str, int]] = []

    def http_request(self, method: str, route: str, status: int, seconds: float) -> None:
        assert seconds >= 0
        self.http.append((method, route, status))

    def grpc_call(self, method: str, code: str, seconds: float) -> None:
        raise AssertionError("no gRPC here")


def _app(metrics: _Recorded, exporter: InMemorySpanExporter) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/things/{thing}")
    async def thing(thing: str) -> dict[str, str]:
        return {"thing": thing}

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("a bug")

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app.add_middleware(TraceRequests, tracer=provider.get_tracer("test"))
    app.add_middleware(MeasureRequests, observe=metrics)
    return app


def test_requests_are_measured_by_route_template_and_status() -> None:
    metrics, exporter = _Recorded(), InMemorySpanExporter()
    with TestClient(_app(metrics, exporter), raise_server_exceptions=False) as client:
        assert client.get("/v1/things/a").status_code == 200
        assert client.get("/nowhere").status_code == 404
        assert client.get("/boom").status_code == 500
    assert metrics.http == [
        ("GET", "/v1/things/{thing}", 200),
        ("GET", "unmatched", 404),
        ("GET", "/boom", 500),
    ]


def test_a_request_span_is_a_child_of_the_callers_traceparent() -> None:
    metrics, exporter = _Recorded(), InMemorySpanExporter()
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    headers = {"traceparent": f"00-{trace_id}-{parent}-01"}
    with TestClient(_app(metrics, exporter)) as client:
        assert client.get("/v1/things/b", headers=headers).status_code == 200
    (span,) = exporter.get_finished_spans()
    assert span.name == "GET /v1/things/b"
    assert format(span.context.trace_id, "032x") == trace_id
    assert span.parent is not None and format(span.parent.span_id, "016x") == parent
    assert span.attributes is not None
    assert span.attributes["http.response.status_code"] == 200
    assert span.attributes["url.path"] == "/v1/things/b"
