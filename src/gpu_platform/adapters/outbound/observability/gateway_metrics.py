"""PrometheusGatewayMetrics: the OpenAI-compatible gateway's requests, latency and tokens.

gpu_platform_gateway_requests_total{model,tenant,code}
gpu_platform_gateway_request_duration_seconds{model}        (to the response's last byte)
gpu_platform_gateway_time_to_first_token_seconds{model}     (streamed responses)
gpu_platform_gateway_tokens_total{model,tenant,kind}        (kind: prompt | completion)
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["PrometheusGatewayMetrics"]

LATENCY_BUCKETS_S = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
)  # fmt: skip


class PrometheusGatewayMetrics:
    """Implements GatewayMetrics on `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "gpu_platform_gateway_requests",
            "Requests to the OpenAI-compatible gateway, by model, tenant and HTTP status",
            ["model", "tenant", "code"],
            registry=registry,
        )
        self.latency = Histogram(
            "gpu_platform_gateway_request_duration_seconds",
            "Gateway request time, arrival to the response's last byte, by model",
            ["model"],
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.ttft = Histogram(
            "gpu_platform_gateway_time_to_first_token_seconds",
            "Streamed responses: arrival to the first bytes of the stream, by model",
            ["model"],
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.token_counts = Counter(
            "gpu_platform_gateway_tokens",
            "Tokens reported by the replicas' responses, by model, tenant and kind",
            ["model", "tenant", "kind"],
            registry=registry,
        )

        # labelled children by label values: `labels()` costs a lock and a lookup per call
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, *values: str) -> Any:
        key = (id(metric), *values)
        child = self._children.get(key)
        if child is None:
            if len(self._children) > 10000:  # models and tenants come and go
                self._children.clear()
            child = self._children[key] = metric.labels(*values)
        return child

    def request_done(self, model: str, tenant: str, code: int, seconds: float) -> None:
        self._child(self.requests, model, tenant, str(code)).inc()
        self._child(self.latency, model).observe(seconds)

    def first_token(self, model: str, seconds: float) -> None:
        self._child(self.ttft, model).observe(seconds)

    def tokens(self, model: str, tenant: str, prompt: int, completion: int) -> None:
        if prompt:
            self._child(self.token_counts, model, tenant, "prompt").inc(prompt)
        if completion:
            self._child(self.token_counts, model, tenant, "completion").inc(completion)
