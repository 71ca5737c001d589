"""OpenTelemetry: a tracer provider per process; no exporter unless an OTLP endpoint is set."""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from gpu_platform import __version__

__all__ = ["TracingError", "configure_tracing"]


class TracingError(Exception):
    """Tracing was asked for but cannot be set up (e.g. the OTLP exporter is not installed)."""


def configure_tracing(
    otlp_endpoint: str | None, extra_processor: SpanProcessor | None = None
) -> TracerProvider:
    """A TracerProvider for this process. With an endpoint, spans go to OTLP/gRPC; the
    exporter comes from the 'otlp' extra, and its absence is an error, not a silent no-op."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": "gpu-platform", "service.version": __version__})
    )
    if otlp_endpoint:
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise TracingError(
                "otlp_endpoint is set but the OTLP exporter is not installed: "
                "pip install 'gpu-platform[otlp]'"
            ) from exc
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint)))
    if extra_processor is not None:
        provider.add_span_processor(extra_processor)
    return provider
