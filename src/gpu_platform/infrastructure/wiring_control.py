"""Wiring of the control plane: its policies from settings, event and metric fan-out,
admission, and the running control plane with its health monitors, services and local agent.
`_`-named factories are container.py's providers.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from gpu_platform.adapters.inbound.grpc.agent_service import AgentServerBase
from gpu_platform.adapters.outbound.observability import OtelJobTracer
from gpu_platform.adapters.outbound.serving.replica_probes import ReplicaProbes
from gpu_platform.adapters.outbound.sim.agent_injector import AgentRoutedInjector
from gpu_platform.adapters.outbound.system import SystemClock, UuidJobIds
from gpu_platform.adapters.tls import TlsFiles
from gpu_platform.application.admission import AdmissionControl, AdmissionLimits, InputLimits
from gpu_platform.application.agent import Agent
from gpu_platform.application.agent_hub import AgentHub
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.application.replication import RaftReplication
from gpu_platform.application.run_as import RunAsAccounts
from gpu_platform.application.services import ServiceManager
from gpu_platform.domain.events import DomainEvent
from gpu_platform.domain.faults.policy import FaultPolicy, XidClass
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.placement import Unschedulable
from gpu_platform.domain.scheduling import QueueOrder, Quota, SchedulerPolicy
from gpu_platform.infrastructure.config import ConfigError, Settings
from gpu_platform.infrastructure.metrics import Metrics
from gpu_platform.infrastructure.replicated import advertised, running_local_agent
from gpu_platform.infrastructure.wiring_node import HealthParts
from gpu_platform.infrastructure.wiring_servers import tls_files
from gpu_platform.ports.outbound.events import EventPublisher
from gpu_platform.ports.outbound.gpu_reset import GpuReset
from gpu_platform.ports.outbound.hardware_store import HardwareStore
from gpu_platform.ports.outbound.health_monitor import FaultInjector, HealthMonitor
from gpu_platform.ports.outbound.job_runner import JobRunner
from gpu_platform.ports.outbound.job_store import JobStore
from gpu_platform.ports.outbound.metrics import SchedulerMetrics
from gpu_platform.ports.outbound.quota_store import QuotaStore

__all__ = [
    "FanoutPublisher",
    "FanoutSchedulerMetrics",
    "configured_quotas",
    "fault_policy",
    "scheduler_policy",
]


class FanoutPublisher:
    """Implements EventPublisher by handing each event to every subscriber in order."""

    def __init__(self, *subscribers: EventPublisher) -> None:
        self._subscribers = subscribers

    def publish(self, event: DomainEvent) -> None:
        for subscriber in self._subscribers:
            subscriber.publish(event)


class FanoutSchedulerMetrics:
    """Implements SchedulerMetrics by reporting to every subscriber in order."""

    def __init__(self, *subscribers: SchedulerMetrics) -> None:
        self._subscribers = subscribers

    def placement_decided(
        self, job_id: str, latency_us: float, failure: Unschedulable | None
    ) -> None:
        for subscriber in self._subscribers:
            subscriber.placement_decided(job_id, latency_us, failure)

    def placement_refused(self, job_id: str, failure: Unschedulable) -> None:
        for subscriber in self._subscribers:
            subscriber.placement_refused(job_id, failure)


def scheduler_policy(settings: Settings) -> SchedulerPolicy:
    try:
        return SchedulerPolicy(
            order=QueueOrder(settings.scheduler_order),
            aging_rate=settings.scheduler_aging_points_per_hour / 3600,
            aging_bound_s=settings.scheduler_aging_bound_seconds,
            fair_share=settings.scheduler_fair_share,
            weights=dict(settings.tenant_weights),
            backfill=settings.scheduler_backfill,
            preemption=settings.scheduler_preemption,
            max_jobs=settings.scheduler_max_jobs_per_cycle,
            min_runtime_s=settings.scheduler_preempt_exempt_seconds,
        )
    except ValueError as exc:
        raise ConfigError(f"configuration: scheduler: {exc}") from None


def configured_quotas(settings: Settings) -> dict[str, Quota]:
    quotas = {}
    for tenant, fields in settings.quotas.items():
        try:
            quotas[tenant] = Quota(**fields)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"configuration: quotas.{tenant}: {exc}") from None
    return quotas


def _admission(settings: Settings, plane: ControlPlane, run_as: RunAsAccounts) -> AdmissionControl:
    return AdmissionControl(
        plane,
        AdmissionLimits(
            max_queued_jobs=settings.max_queued_jobs_per_tenant,
            max_pending_gpus=settings.max_pending_gpus_per_tenant,
        ),
        InputLimits(
            max_argv_bytes=settings.max_argv_bytes,
            max_env_vars=settings.max_env_vars,
            max_env_bytes=settings.max_env_bytes,
            max_gpus=settings.max_gpus_per_job,
            max_array_size=settings.max_array_size,
        ),
        run_as.check,
    )


def fault_policy(settings: Settings) -> FaultPolicy:
    try:
        return FaultPolicy(
            xid_overrides=tuple(
                (x, XidClass(c)) for x, c in sorted(settings.xid_overrides.items())
            ),
            ecc_corrected_alert=settings.ecc_corrected_alert,
            thermal_hot_c=settings.thermal_hot_celsius,
            thermal_cool_c=settings.thermal_cool_celsius,
            node_suspect_after_s=settings.node_suspect_after_seconds,
            node_down_after_s=settings.node_down_after_seconds,
            max_backoff_s=settings.retry_backoff_max_seconds,
        )
    except ValueError as exc:
        raise ConfigError(f"configuration: fault policy: {exc}") from None


def _gpu_reset(runner: JobRunner, health: HealthParts) -> GpuReset | None:
    """Replicated (the runner is the agent hub), each node's agent resets its GPUs."""
    return runner if isinstance(runner, AgentHub) else health.reset


def _injector(runner: JobRunner, health: HealthParts, inventory: Inventory) -> FaultInjector | None:
    """Replicated, scripts go to the agent of the node they name (this server's by default)."""
    if health.injector is None or not isinstance(runner, AgentHub):
        return health.injector
    return AgentRoutedInjector(runner, inventory.nodes[0].name if inventory.nodes else "local")


def _running_control_plane(
    settings: Settings,
    inventory: Inventory,
    store: JobStore,
    runner: JobRunner,
    clock: SystemClock,
    ids: UuidJobIds,
    publisher: EventPublisher,
    hardware: HardwareStore,
    health: HealthParts,
    metrics: Metrics,
    tracer: OtelJobTracer,
    quota_store: QuotaStore,
    replication: RaftReplication | None,
    agent_server: AgentServerBase | None,
) -> Iterator[ControlPlane]:
    addresses = ("", "", "")
    local_node = None
    if replication is not None:
        agent_port = agent_server.port if agent_server is not None else settings.agent_port
        ports = (settings.port, settings.grpc_port, agent_port)
        addresses = advertised(settings, tls_files(settings), ports).as_tuple()
        if settings.runs_local_agent and inventory.nodes:
            local_node = inventory.nodes[0].name
        if isinstance(runner, AgentHub):  # leases renewed within one election timeout only
            window = settings.lease_renewal_window_seconds
            runner.renew_leases_while(partial(replication.node.heard_quorum_within, window))
    plane = ControlPlane(
        inventory,
        store,
        runner,
        clock,
        ids,
        publisher,
        stop_grace_s=settings.stop_grace_seconds,
        shutdown_policy=settings.shutdown_policy,
        schedule_interval_s=settings.schedule_interval_seconds,
        pin_cpus=settings.cpu_pinning == "on"
        or (settings.cpu_pinning == "auto" and not inventory.simulated),
        gang_port_base=settings.gang_port_base,
        hardware=hardware,
        gpu_reset=_gpu_reset(runner, health),
        injector=_injector(runner, health, inventory),
        fault_policy=fault_policy(settings),
        check_heartbeats=health.heartbeats,
        reset_in_background=True,
        scheduler_metrics=FanoutSchedulerMetrics(metrics.scheduler, tracer),
        scheduler_policy=scheduler_policy(settings),
        quotas=configured_quotas(settings),
        quota_store=quota_store if replication is None else None,
        replication=replication,
        server_addresses=addresses,
        trace_context=tracer,
        local_node=local_node,
    )
    metrics.scheduler.watch_jobs(plane.get, clock.now)  # before start: recovery moves jobs
    plane.start()
    yield plane
    plane.shutdown()


def _local_agent(
    settings: Settings,
    inventory: Inventory,
    health: HealthParts,
    agent_server: AgentServerBase | None,
    tls: TlsFiles | None,
    runner: JobRunner | None,
) -> Iterator[Agent | None]:
    if runner is None:
        yield None
        return
    yield from running_local_agent(
        settings,
        inventory,
        runner,
        health.monitors,
        agent_server,
        tls,
        gpu_reset=health.reset,
        injector=health.injector,
    )


def _running_health(plane: ControlPlane, health: HealthParts) -> Iterator[HealthParts]:
    """Start the monitors feeding the control plane; stop them before it shuts down.
    Replicated, monitors run in the agents instead."""
    if plane.replicated:
        yield health
        return
    started: list[HealthMonitor] = []
    try:
        for monitor in health.monitors:
            monitor.start(plane.report_health)
            started.append(monitor)
        yield health
    finally:
        for monitor in reversed(started):
            monitor.stop()


def _running_services(
    plane: ControlPlane, clock: SystemClock, runner: JobRunner
) -> Iterator[ServiceManager]:
    """Services with replicas (docs/services.md); also the gateway's ModelRoutes. Embedded,
    this process probes the replicas itself (replicated, each node's agent does)."""
    probes = runner.monitor if isinstance(runner, ReplicaProbes) else None
    if probes is not None:
        probes.start(plane.report_health)
    manager = ServiceManager(plane, clock)
    manager.start()
    yield manager
    manager.stop()
    if probes is not None:
        probes.stop()
