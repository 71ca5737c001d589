from __future__ import annotations

import importlib.util

import pytest

from gpu_platform.infrastructure.tracing import TracingError, configure_tracing


def test_no_endpoint_means_no_exporter() -> None:
    provider = configure_tracing(None)
    with provider.get_tracer("t").start_as_current_span("x") as span:
        assert span.is_recording()
    assert provider.resource.attributes["service.name"] == "gpu-platform"


def _otlp_installed() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry.exporter.otlp") is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.skipif(_otlp_installed(), reason="the OTLP exporter is installed here")
def test_an_endpoint_without_the_exporter_is_an_error_not_a_silent_no_op() -> None:
    with pytest.raises(TracingError, match=r"gpu-platform\[otlp\]"):
        configure_tracing("http://127.0.0.1:4317")
