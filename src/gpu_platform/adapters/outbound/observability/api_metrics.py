"""PrometheusApiMetrics: REST and gRPC request latency, by route template and status."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Histogram

__all__ = ["API_BUCKETS_S", "PrometheusApiMetrics"]

API_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class PrometheusApiMetrics:
    """Implements ApiMetrics on `registry`. Labels stay bounded: REST routes are templates
    (`/v1/jobs/{job_id}`) and gRPC methods are the service's own names."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.http = Histogram(
            "gpu_platform_http_request_duration_seconds",
            "REST request handling time, by route template, method and status",
            ["method", "route", "status"],
            buckets=API_BUCKETS_S,
            registry=registry,
        )
        self.grpc = Histogram(
            "gpu_platform_grpc_request_duration_seconds",
            "Unary gRPC call handling time, by method and status code",
            ["method", "code"],
            buckets=API_BUCKETS_S,
            registry=registry,
        )
        self._grpc: dict[tuple[str, str], Any] = {}

    def http_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.http.labels(method=method, route=route, status=str(status)).observe(seconds)

    def grpc_call(self, method: str, code: str, seconds: float) -> None:
        child = self._grpc.get((method, code))
        if child is None:  # the labelled child, looked up once per (method, code)
            child = self._grpc[(method, code)] = self.grpc.labels(method=method, code=code)
        child.observe(seconds)
