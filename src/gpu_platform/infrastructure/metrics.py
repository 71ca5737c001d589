"""Prometheus metrics: a registry per process, event counters and live cluster gauges.

`Metrics` owns the registry and the adapters that write to it: scheduler series (placement,
transitions, preemptions, recovery: `scheduler`), API latency (`api`), and collectors that
read the cluster at scrape time (jobs and GPUs by state, queue depth, allocation ratio,
fragmentation). docs/observability.md lists every series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from gpu_platform.adapters.outbound.observability import (
    PrometheusApiMetrics,
    PrometheusSchedulerMetrics,
)
from gpu_platform.adapters.outbound.observability.gateway_metrics import PrometheusGatewayMetrics
from gpu_platform.domain.events import (
    ArraySubmitted,
    DomainEvent,
    JobFinished,
    JobSubmitted,
    StaleReportIgnored,
)
from gpu_platform.domain.model.gpu import GpuState
from gpu_platform.domain.placement.fragmentation import MILLI, NodeShape, fragmentation
from gpu_platform.domain.placement.view import DEFAULT_TYPICAL
from gpu_platform.infrastructure.dcgm_metrics import exposition
from gpu_platform.ports.inbound.job_service import GpuInfo, JobService
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
        infos = service.gpus()
        for info in infos:
            key = (info.gpu.node, str(info.state))
            counts[key] = counts.get(key, 0) + 1
        for (node, state), n in sorted(counts.items()):
            gpus.add_metric([node, state], n)
        yield gpus
        yield from _allocation(infos)
        yield from _shares(infos)
        jobs = GaugeMetricFamily("gpu_platform_jobs", "Jobs by state", labels=["state"])
        for state, n in sorted(service.status().jobs_by_state.items()):
            jobs.add_metric([state], n)
        yield jobs
        depth = GaugeMetricFamily(
            "gpu_platform_queue_depth",
            "QUEUED jobs by tenant and priority",
            labels=["tenant", "priority"],
        )
        queued: dict[tuple[str, str], int] = {}
        for job in service.list_jobs("QUEUED"):
            key = (job.spec.tenant, str(job.spec.priority))
            queued[key] = queued.get(key, 0) + 1
        for (tenant, priority), n in sorted(queued.items()):
            depth.add_metric([tenant, priority], n)
        yield depth


def _shares(infos: list[GpuInfo]) -> Iterator[GaugeMetricFamily]:
    """Per shared GPU: how many jobs share it and the device memory their shares pin."""
    count = GaugeMetricFamily(
        "gpu_platform_gpu_shares", "Jobs sharing a GPU (shares of one GPU)", labels=["node", "gpu"]
    )
    pinned = GaugeMetricFamily(
        "gpu_platform_gpu_pinned_memory_bytes",
        "Device memory pinned by the shares of a GPU",
        labels=["node", "gpu"],
    )
    for info in infos:
        if info.shares:
            labels = [info.gpu.node, str(info.gpu.index)]
            count.add_metric(labels, len(info.shares))
            pinned.add_metric(labels, sum(s.pinned_bytes for s in info.shares))
    yield count
    yield pinned


def _allocation(infos: list[GpuInfo]) -> Iterator[GaugeMetricFamily]:
    """Allocation ratio (held / all GPUs) and FGD fragmentation of the free GPUs: the share
    of free milli-GPU that the typical task mix could not use where it lies."""
    held = sum(1 for i in infos if i.state in (GpuState.ALLOCATED, GpuState.IN_USE))
    ratio = GaugeMetricFamily(
        "gpu_platform_gpu_allocation_ratio", "GPUs held by jobs / all GPUs (0..1)"
    )
    ratio.add_metric([], held / len(infos) if infos else 0.0)
    yield ratio
    free: dict[str, list[str]] = {}
    for i in infos:
        if i.state is GpuState.AVAILABLE and not i.hot:
            free.setdefault(i.gpu.node, []).append(i.gpu.model)
    lost = total = 0.0
    for models in free.values():
        shape = NodeShape(models[0], 1 << 40, 1 << 40, (MILLI,) * len(models))
        lost += fragmentation(shape, DEFAULT_TYPICAL)
        total += MILLI * len(models)
    frag = GaugeMetricFamily(
        "gpu_platform_fragmentation_ratio",
        "Share of free GPU capacity the typical task mix could not use (FGD, 0..1)",
    )
    frag.add_metric([], lost / total if total else 0.0)
    yield frag


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
        self.scheduler = PrometheusSchedulerMetrics(self.registry)
        self.api = PrometheusApiMetrics(self.registry)
        self.gateway = PrometheusGatewayMetrics(self.registry)

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
        self.scheduler.publish(event)
        if isinstance(event, JobSubmitted):
            self.jobs_submitted.inc()
        elif isinstance(event, ArraySubmitted):
            self.jobs_submitted.inc(len(event.task_ids))
        elif isinstance(event, JobFinished):
            self.jobs_finished.labels(state=str(event.state)).inc()
        elif isinstance(event, StaleReportIgnored):
            self.stale_reports.inc()

    def render(self) -> tuple[bytes, str]:
        return exposition(self.registry), CONTENT_TYPE_LATEST
