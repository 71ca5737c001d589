"""Turn domain events and reports into logs, Prometheus series and trace spans."""

from gpu_platform.adapters.outbound.observability.api_metrics import PrometheusApiMetrics
from gpu_platform.adapters.outbound.observability.job_traces import OtelJobTracer
from gpu_platform.adapters.outbound.observability.log_events import StructlogEventPublisher
from gpu_platform.adapters.outbound.observability.raft_metrics import PrometheusRaftMetrics
from gpu_platform.adapters.outbound.observability.scheduler_metrics import (
    PrometheusSchedulerMetrics,
)

__all__ = [
    "OtelJobTracer",
    "PrometheusApiMetrics",
    "PrometheusRaftMetrics",
    "PrometheusSchedulerMetrics",
    "StructlogEventPublisher",
]
