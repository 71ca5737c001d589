"""Prometheus metrics: a registry per process, event counters and live cluster gauges."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from gpu_platform.domain.events import DomainEvent, JobFinished, JobSubmitted, StaleReportIgnored
from gpu_platform.ports.inbound.job_service import JobService
from gpu_platform.ports.inbound.usage import UsageQueries

__all__ = ["Metrics"]


class _ClusterCollector(Collector):
    """Reads live gauges from the JobService at scrape time (never stale)."""

    def __init__(self, service: Callable[[], JobService]) -> None:
        self._service = service

    def collect(self) -> Iterator[GaugeMetricFamily]:
        service = self._service()
        gpus = GaugeMetricFamily(
            "gpu_platform_gpus", "GPUs by effective state", labels=["node", "state"]
        )
        counts: dict[tuple[str, str], int] = {}
        for info in service.gpus():
            key = (info.gpu.node, str(info.state))
            counts[key] = counts.get(key, 0) + 1
        for (node, state), n in sorted(counts.items()):
            gpus.add_metric([node, state], n)
        yield gpus
        jobs = GaugeMetricFamily("gpu_platform_jobs", "Jobs by state", labels=["state"])
        for state, n in sorted(service.status().jobs_by_state.items()):
            jobs.add_metric([state], n)
        yield jobs


class _UsageCollector(Collector):
    def __init__(self, usage: Callable[[], UsageQueries]) -> None:
        self._usage = usage

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "gpu_platform_tenant_gpu_hours",
            "GPU-hours consumed by running jobs, per tenant, since the records began",
            labels=["tenant"],
        )
        for tenant, hours in sorted(self._usage().usage().gpu_hours_by_tenant.items()):
            family.add_metric([tenant], hours)
        yield family


class Metrics:
    """Owns the registry. Implements EventPublisher so domain events become counters."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.jobs_submitted = Counter(
            "gpu_platform_jobs_submitted", "Jobs accepted", registry=self.registry
        )
        self.jobs_finished = Counter(
            "gpu_platform_jobs_finished",
            "Job attempts that ended, by outcome",
            ["state"],
            registry=self.registry,
        )
        self.stale_reports = Counter(
            "gpu_platform_stale_reports",
            "Reports from superseded attempts, ignored by epoch fencing",
            registry=self.registry,
        )

    def watch(self, service: Callable[[], JobService]) -> None:
        """Export live GPU and job gauges read from `service` at scrape time."""
        self.registry.register(_ClusterCollector(service))

    def watch_gpus(self, collector: Collector) -> None:
        """Export per-GPU telemetry (dcgm-exporter names) through `collector`."""
        self.registry.register(collector)

    def watch_usage(self, usage: Callable[[], UsageQueries]) -> None:
        """Export GPU-hours per tenant, all time, read at scrape time."""
        self.registry.register(_UsageCollector(usage))

    def publish(self, event: DomainEvent) -> None:
        if isinstance(event, JobSubmitted):
            self.jobs_submitted.inc()
        elif isinstance(event, JobFinished):
            self.jobs_finished.labels(state=str(event.state)).inc()
        elif isinstance(event, StaleReportIgnored):
            self.stale_reports.inc()

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
