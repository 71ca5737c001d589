"""The composition root: the only place that names concrete adapters.

Containers are split by concern; `Container` joins them. Adapters are chosen by Settings.
Things with a lifecycle (the SQLite store, the process runner, the running control plane) are
`providers.Resource`s: `init_resources()` starts them, `shutdown_resources()` stops them in
reverse order. Tests build the app through this container and override adapters with fakes
from `gpu_platform.testing`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import structlog
from dependency_injector import containers, providers
from fastapi import FastAPI
from opentelemetry.sdk.trace import TracerProvider

from gpu_platform.adapters.audit_seal import load_key as load_audit_key
from gpu_platform.adapters.inbound.grpc import GrpcServer
from gpu_platform.adapters.inbound.grpc.agent_service import AgentGrpcServer
from gpu_platform.adapters.inbound.rest import create_app
from gpu_platform.adapters.inbound.web import Site, install_dashboard
from gpu_platform.adapters.inbound.web.session import WebAuth
from gpu_platform.adapters.outbound.cgroups import (
    CgroupV1Isolation,
    CgroupV2Isolation,
    SystemdScopeIsolation,
    detect_isolation,
)
from gpu_platform.adapters.outbound.discovery import detect
from gpu_platform.adapters.outbound.mps.control import MpsDaemonController
from gpu_platform.adapters.outbound.nvml import NvidiaSmiGpuReset, NvmlHealthMonitor
from gpu_platform.adapters.outbound.nvml.mig import NvmlMigController
from gpu_platform.adapters.outbound.observability import OtelJobTracer, StructlogEventPublisher
from gpu_platform.adapters.outbound.observability.event_hub import EventHub
from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.adapters.outbound.process.fence import ProcessLeaseFence
from gpu_platform.adapters.outbound.serving.replica_probes import ReplicaProbes
from gpu_platform.adapters.outbound.sim import SimulatedHardware
from gpu_platform.adapters.outbound.sim.agent_injector import AgentRoutedInjector
from gpu_platform.adapters.outbound.storage import (
    JsonlAuditLog,
    SqliteAccessStore,
    SqliteHardwareStore,
    SqliteJobStore,
    SqliteQuotaStore,
    SqliteRunAsStore,
)
from gpu_platform.adapters.outbound.system import SystemClock, UuidJobIds
from gpu_platform.adapters.outbound.telemetry_health import TelemetryHealthMonitor
from gpu_platform.adapters.tls import TlsFiles
from gpu_platform.application.access_replica import ReplicatedAccessStore
from gpu_platform.application.admission import AdmissionControl, AdmissionLimits, InputLimits
from gpu_platform.application.agent import Agent
from gpu_platform.application.agent_hub import AgentHub
from gpu_platform.application.auth import AccessControl
from gpu_platform.application.auth_scope import AuditedHardwareStore, AuditTrail
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.application.gateway.ledger import ServingLedger
from gpu_platform.application.mig_jobs import MigJobRunner
from gpu_platform.application.mps_jobs import MpsJobRunner
from gpu_platform.application.replication import RaftReplication
from gpu_platform.application.run_as import RunAsAccounts
from gpu_platform.application.run_as_replica import ReplicatedRunAsStore
from gpu_platform.application.services import ServiceManager
from gpu_platform.application.usage import UsageService
from gpu_platform.domain.events import DomainEvent
from gpu_platform.domain.faults.policy import FaultPolicy, XidClass
from gpu_platform.domain.model.gpu import Gpu
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.placement import Unschedulable
from gpu_platform.domain.scheduling import QueueOrder, Quota, SchedulerPolicy
from gpu_platform.infrastructure.config import ConfigError, Settings
from gpu_platform.infrastructure.containers import container_runner, with_containers
from gpu_platform.infrastructure.dcgm_metrics import DcgmCollector, service_labels
from gpu_platform.infrastructure.gateway import (
    GatewayServer,
    gateway_routes,
    install_gateway,
)
from gpu_platform.infrastructure.metrics import Metrics
from gpu_platform.infrastructure.replicated import (
    advertised,
    running_agent_server,
    running_local_agent,
    running_replication,
)
from gpu_platform.infrastructure.tracing import configure_tracing
from gpu_platform.ports.inbound.model_routes import ModelRoutes
from gpu_platform.ports.outbound.access_store import AccessStore
from gpu_platform.ports.outbound.audit_log import AuditLog
from gpu_platform.ports.outbound.events import EventPublisher
from gpu_platform.ports.outbound.gpu_discovery import GpuDiscovery, GpuTelemetry
from gpu_platform.ports.outbound.gpu_reset import GpuReset
from gpu_platform.ports.outbound.hardware_store import HardwareStore
from gpu_platform.ports.outbound.health_monitor import FaultInjector, HealthMonitor
from gpu_platform.ports.outbound.isolation import Isolation, IsolationError
from gpu_platform.ports.outbound.job_runner import JobRunner
from gpu_platform.ports.outbound.job_store import JobStore
from gpu_platform.ports.outbound.metrics import SchedulerMetrics
from gpu_platform.ports.outbound.quota_store import QuotaStore
from gpu_platform.ports.outbound.run_as_store import RunAsStore

__all__ = [
    "Container",
    "FanoutPublisher",
    "FanoutSchedulerMetrics",
    "HealthParts",
    "fault_policy",
    "select_health",
    "tls_files",
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


def select_discovery(settings: Settings) -> GpuDiscovery:
    """auto: a vendor adapter that finds GPUs (NVML, amdsmi, Level Zero) joined with hwloc or
    sysfs locality, else the simulated profile — the reason is in the inventory's notes."""
    if settings.inventory == "file" and settings.inventory_file is None:
        raise ConfigError("inventory=file needs inventory_file (GPU_PLATFORM_INVENTORY_FILE)")
    return detect(
        settings.inventory,
        inventory_file=settings.inventory_file,
        sim_profile=settings.sim_profile,
        hwloc_xml=settings.hwloc_xml,
    )


def _discover(discovery: GpuDiscovery) -> Inventory:
    return discovery.discover()


def _sqlite_store(settings: Settings) -> Iterator[JobStore]:
    store = SqliteJobStore(settings.data_dir / "state.db")
    yield store
    store.close()


def _sqlite_hardware(settings: Settings) -> Iterator[HardwareStore]:
    store = SqliteHardwareStore(settings.data_dir / "state.db")  # beside the jobs, own tables
    yield store
    store.close()


def tls_files(settings: Settings) -> TlsFiles | None:
    """The server's TLS material, or None for plaintext; half a pair is a ConfigError."""
    cert, key, ca = settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file
    if (cert is None) != (key is None):
        raise ConfigError("TLS needs both tls_cert_file and tls_key_file")
    if cert is None or key is None:
        if ca is not None:
            raise ConfigError("tls_client_ca_file needs tls_cert_file and tls_key_file")
        return None
    for name, path in (("tls_cert_file", cert), ("tls_key_file", key), ("tls_client_ca_file", ca)):
        if path is not None and not path.is_file():
            raise ConfigError(f"{name}: {path} is not a readable file")
    return TlsFiles(cert, key, ca)


def _sqlite_access(settings: Settings) -> Iterator[AccessStore]:
    store = SqliteAccessStore(settings.data_dir / "state.db")  # own tables
    yield store
    store.close()


def _sqlite_run_as(settings: Settings) -> Iterator[RunAsStore]:
    store = SqliteRunAsStore(settings.data_dir / "state.db")  # own table
    yield store
    store.close()


def _run_as(
    settings: Settings, store: RunAsStore, trail: AuditTrail, replication: RaftReplication | None
) -> RunAsAccounts:
    protected = (str(settings.data_dir.resolve()),)
    if replication is None:  # embedded: this server's state.db
        return RunAsAccounts(store, trail, protected)
    return RunAsAccounts(ReplicatedRunAsStore(replication), trail, protected, shared=True)


def _sqlite_quotas(settings: Settings) -> Iterator[QuotaStore]:
    store = SqliteQuotaStore(settings.data_dir / "state.db")  # own table
    yield store
    store.close()


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


def _audit_log(settings: Settings) -> Iterator[AuditLog]:
    path = settings.audit_file or settings.data_dir / "audit.jsonl"
    key, new_key = None, False
    if settings.audit_key_file is not None:  # seals the chain's head (audit_seal)
        new_key = not settings.audit_key_file.exists()
        try:
            key = load_audit_key(settings.audit_key_file, create=True)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"configuration: audit_key_file: {exc}") from None
        if settings.audit_key_file.resolve().is_relative_to(settings.data_dir.resolve()):
            structlog.get_logger(__name__).warning(
                "audit_key_file is inside the data directory: whoever can rewrite the log "
                "can read the key too",
                audit_key_file=str(settings.audit_key_file),
            )
    log = JsonlAuditLog(path, key, adopt=new_key)
    yield log
    log.close()


def _access_store(legacy: AccessStore, replication: RaftReplication | None) -> AccessStore:
    return legacy if replication is None else ReplicatedAccessStore(replication)


def _access(
    settings: Settings, store: AccessStore, clock: SystemClock, audit: AuditLog
) -> AccessControl:
    return AccessControl(
        store,
        clock,
        audit,
        enabled=settings.auth == "on",
        rate_per_s=settings.rate_limit_per_second,
        burst=settings.rate_limit_burst,
        failures_per_minute=settings.auth_failures_per_minute,
    )


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


@dataclass(frozen=True)
class HealthParts:
    """What watches and repairs GPUs: monitors to start, the injector, the reset adapter, and
    whether some monitor sends heartbeats (then silent nodes are judged)."""

    monitors: tuple[HealthMonitor, ...]
    injector: FaultInjector | None
    reset: GpuReset | None
    heartbeats: bool


def select_health(settings: Settings, inventory: Inventory, discovery: GpuDiscovery) -> HealthParts:
    """health_source=auto: NVML events and polling for an NVML inventory, telemetry polling of
    the discovery adapter for other real GPUs (amdsmi, Level Zero), else the simulated
    hardware. Resets: nvidia-smi for NVML GPUs, the simulator for simulated ones, none for
    other vendors (a GPU needing a reset then goes OFFLINE). The injector is the simulator."""
    from_nvml = inventory.source.split("+")[0] == "nvml"
    source = settings.health_source
    polls = isinstance(discovery, GpuTelemetry)
    if source == "auto":
        source = (
            "nvml" if from_nvml else "telemetry" if polls and not inventory.simulated else "sim"
        )
    if source == "telemetry" and not polls:
        raise ConfigError(f"health_source=telemetry: {discovery.name} has no telemetry")
    node = inventory.nodes[0].name if inventory.nodes else "local"
    sim = SimulatedHardware(
        inventory,
        heartbeat_interval_s=min(settings.health_poll_seconds, settings.agent_heartbeat_seconds),
        heartbeats=source == "sim",
    )
    reset: GpuReset | None = None
    if from_nvml:
        reset = NvidiaSmiGpuReset(node)
    elif inventory.simulated:
        reset = sim
    monitors: tuple[HealthMonitor, ...] = ()
    if source == "sim":
        monitors = (sim,)
    elif source == "nvml":
        monitors = (NvmlHealthMonitor(node=node, poll_interval_s=settings.health_poll_seconds),)
        if settings.fault_injection:
            monitors += (sim,)
    elif source == "telemetry":
        assert isinstance(discovery, GpuTelemetry)
        monitors = (TelemetryHealthMonitor(discovery, interval_s=settings.health_poll_seconds),)
        if settings.fault_injection:
            monitors += (sim,)
    elif settings.fault_injection:
        monitors = (sim,)
    injector = sim if settings.fault_injection else None
    return HealthParts(monitors, injector, reset, heartbeats=source != "none")


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


def job_isolation(settings: Settings) -> Isolation:
    isolation = detect_isolation(settings.isolation)
    if isinstance(isolation, CgroupV1Isolation | CgroupV2Isolation | SystemdScopeIsolation):
        # One cgroup subtree per data directory, so two servers never sweep each other's jobs.
        instance = hashlib.sha256(str(settings.data_dir.resolve()).encode()).hexdigest()[:12]
        isolation.use_prefix(f"gpu-platform/{instance}")
    return isolation


def _runner(settings: Settings, isolation: Isolation, inventory: Inventory) -> Iterator[JobRunner]:
    """Replicated, the leader's jobs run on agents (the hub); else in this process."""
    if settings.server_id:
        yield AgentHub(stale_after_s=settings.node_suspect_after_seconds)
        return
    runner = process_runner(settings, isolation, inventory)
    node = inventory.nodes[0].name if inventory.nodes else "local"
    yield ReplicaProbes(next(runner), node)  # service replicas: a port and health checks
    yield from runner  # closes the runner


def _local_runner(
    settings: Settings, isolation: Isolation, inventory: Inventory
) -> Iterator[JobRunner | None]:
    if not settings.runs_local_agent:
        yield None
        return
    yield from process_runner(settings, isolation, inventory, agent=True)


def process_runner(
    settings: Settings, isolation: Isolation, inventory: Inventory, *, agent: bool = False
) -> Iterator[JobRunner]:
    swept = isolation.sweep()  # confinement left by a crashed earlier run
    if swept:
        structlog.get_logger(__name__).warning("removed stale job cgroups", names=swept)
    fence = None  # an agent's tasks stop by themselves when its lease from the leader ends
    if agent:
        fence = ProcessLeaseFence(settings.data_dir / "fence", settings.agent_fence_grace_seconds)
    runner = ProcessJobRunner(
        settings.data_dir / "jobs",
        isolation=isolation,
        visible_devices=settings.visible_devices,
        log_max_bytes=settings.job_log_max_bytes,
        pids_max=settings.job_pids_max,
        fence=fence,
        default_user=settings.job_user,
        pid_namespace=settings.job_pid_namespace,
        protected=(settings.data_dir,),
    )
    containers = container_runner(settings, inventory)  # tasks that name an image
    routed = with_containers(runner, containers)
    if routed is not runner:  # the agent finds the lease fence on the runner it is given
        routed.fence = fence  # type: ignore[attr-defined]
    local = inventory.nodes[0].gpus if inventory.nodes else ()
    if settings.mig_controller == "nvml":  # MIG jobs get an instance on this node's GPUs
        routed = MigJobRunner(routed, NvmlMigController(), {g.index: g.model for g in local})
    mps = MpsJobRunner(routed, mps_controller(settings, local))  # MPS shares join a daemon
    mps.fence = fence  # type: ignore[attr-defined]
    yield mps
    if containers is not None:
        containers.close(settings.stop_grace_seconds)
        containers.runtime.close()
    runner.close(settings.stop_grace_seconds)
    try:  # no job cgroup, nor this server's prefix group, outlives it
        isolation.sweep()
    except IsolationError as exc:
        structlog.get_logger(__name__).warning("job cgroups left behind", error=str(exc))


def mps_controller(settings: Settings, gpus: Iterable[Gpu]) -> MpsDaemonController:
    """One MPS daemon per GPU of this node, its pipes and logs under the data directory."""
    root = settings.data_dir / "mps"
    return MpsDaemonController(
        root / "pipe",
        root / "log",
        executable=settings.mps_control,
        gpu_ids={g.index: g.uuid for g in gpus},
    )


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
    agent_server: AgentGrpcServer | None,
) -> Iterator[ControlPlane]:
    addresses = ("", "", "")
    local_node = None
    if replication is not None:
        agent_port = agent_server.port if agent_server is not None else settings.agent_port
        ports = (settings.port, settings.grpc_port, agent_port)
        addresses = advertised(settings, tls_files(settings), ports).as_tuple()
        if settings.runs_local_agent and inventory.nodes:
            local_node = inventory.nodes[0].name
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
    agent_server: AgentGrpcServer | None,
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


def _rest_app(
    settings: Settings,
    plane: ControlPlane,
    metrics: Metrics,
    tracer: TracerProvider,
    discovery: GpuDiscovery,
    usage: UsageService,
    jobs: AdmissionControl,
    access: AccessControl,
    trail: AuditTrail,
    events: EventHub,
    run_as: RunAsAccounts,
    routes: ModelRoutes,
    ledger: ServingLedger,
    services: ServiceManager,
) -> FastAPI:
    metrics.watch(lambda: plane)
    metrics.watch_usage(lambda: usage)
    telemetry = discovery if isinstance(discovery, GpuTelemetry) else None
    if telemetry is not None:
        metrics.watch_gpus(DcgmCollector(telemetry.snapshot, service_labels(lambda: plane)))
    app = create_app(
        jobs,
        admin=plane,
        metrics=metrics.render,
        tracer_provider=tracer,
        usage=usage,
        api_metrics=metrics.api,
        access=access,
        trail=trail,
        run_as=run_as,
        services=services,
        max_request_bytes=settings.max_request_bytes,
        metrics_auth=settings.metrics_auth,
    )
    site = Site(
        jobs,
        WebAuth(access),
        trail,
        admin=plane,
        usage=usage,
        events=events,
        topology=plane.topology,
        telemetry=None if telemetry is None else telemetry.snapshot,
        services=services,
    )
    install_dashboard(app, site)
    install_gateway(app, settings, routes, access, metrics.gateway, ledger)
    return app


def _gateway_server(
    settings: Settings,
    routes: ModelRoutes,
    access: AccessControl,
    metrics: Metrics,
    ledger: ServingLedger,
    tls: TlsFiles | None,
) -> Iterator[GatewayServer | None]:
    """With `gateway_port` set, the gateway on its own port, serving from here on."""
    if settings.gateway != "on" or settings.gateway_port is None:
        yield None
        return
    options = tls.uvicorn_options() if tls is not None else None
    server = GatewayServer(settings, routes, access, metrics.gateway, ledger, options)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _grpc_server(
    settings: Settings,
    plane: ControlPlane,
    events: EventHub,
    tracer: TracerProvider,
    metrics: Metrics,
    jobs: AdmissionControl,
    access: AccessControl,
    trail: AuditTrail,
    run_as: RunAsAccounts,
    services: ServiceManager,
) -> Iterator[GrpcServer | None]:
    if settings.grpc_port < 0:
        yield None
        return
    server = GrpcServer(
        jobs,
        settings.host,
        settings.grpc_port,
        events=events,
        tracer_provider=tracer,
        api_metrics=metrics.api,
        admin=plane,
        access=access,
        trail=trail,
        tls=tls_files(settings),
        run_as=run_as,
        serving=services,
        max_message_bytes=settings.max_request_bytes,
    )
    server.start()
    yield server
    server.stop(grace_s=2.0)


class Observability(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    metrics = providers.Singleton(Metrics)
    tracer_provider = providers.Singleton(configure_tracing, settings.provided.otlp_endpoint)
    job_tracer = providers.Singleton(OtelJobTracer, tracer_provider)
    log_events = providers.Singleton(StructlogEventPublisher, job_tracer.provided.trace_id)
    event_hub = providers.Singleton(EventHub)
    # the tracer first: the log line of an event then carries the job's trace id
    publisher = providers.Singleton(FanoutPublisher, job_tracer, log_events, metrics, event_hub)


class Adapters(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    clock = providers.Singleton(SystemClock)
    ids = providers.Singleton(UuidJobIds)
    discovery = providers.Singleton(select_discovery, settings)
    inventory = providers.Singleton(_discover, discovery)
    store = providers.Resource(_sqlite_store, settings)
    isolation = providers.Singleton(job_isolation, settings)
    runner = providers.Resource(_runner, settings, isolation, inventory)
    # the in-process agent's runner (replicated with local_agent); built only when used
    local_runner = providers.Resource(_local_runner, settings, isolation, inventory)
    hardware = providers.Resource(_sqlite_hardware, settings)
    health_parts = providers.Singleton(select_health, settings, inventory, discovery)
    access_store = providers.Resource(_sqlite_access, settings)
    quota_store = providers.Resource(_sqlite_quotas, settings)
    run_as_store = providers.Resource(_sqlite_run_as, settings)
    audit_log = providers.Resource(_audit_log, settings)


class Container(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)
    observability = providers.Container(Observability, settings=settings)
    adapters = providers.Container(Adapters, settings=settings)
    # Operator actions recorded by the control plane also go to the hash-chained audit log.
    audited_hardware = providers.Singleton(
        AuditedHardwareStore, adapters.hardware, adapters.audit_log
    )
    tls = providers.Singleton(tls_files, settings)
    policy = providers.Singleton(fault_policy, settings)
    replication = providers.Resource(
        running_replication,
        settings,
        policy,
        tls,
        observability.metrics.provided.registry,
        audited_hardware.provided.append_audit,  # refused Raft senders
    )
    agent_server = providers.Resource(
        running_agent_server, settings, adapters.runner, tls, audited_hardware.provided.append_audit
    )
    control_plane = providers.Resource(
        _running_control_plane,
        settings,
        adapters.inventory,
        adapters.store,
        adapters.runner,
        adapters.clock,
        adapters.ids,
        observability.publisher,
        audited_hardware,
        adapters.health_parts,
        observability.metrics,
        observability.job_tracer,
        adapters.quota_store,
        replication,
        agent_server,  # first: the control plane announces the port it got
    )
    health = providers.Resource(_running_health, control_plane, adapters.health_parts)
    local_agent = providers.Resource(
        _local_agent,
        settings,
        adapters.inventory,
        adapters.health_parts,
        agent_server,
        tls,
        adapters.local_runner,
    )
    serving_ledger = providers.Singleton(ServingLedger)
    usage = providers.Singleton(UsageService, control_plane, adapters.clock, serving_ledger)
    audit_trail = providers.Singleton(AuditTrail, adapters.audit_log, adapters.clock)
    run_as = providers.Singleton(_run_as, settings, adapters.run_as_store, audit_trail, replication)
    jobs_api = providers.Singleton(_admission, settings, control_plane, run_as)
    # services with replicas; the gateway routes to their replicas (and a routes file's)
    services = providers.Resource(_running_services, control_plane, adapters.clock, adapters.runner)
    model_routes = providers.Singleton(gateway_routes, settings, services)
    # replicated: tenants and tokens are cluster state (state.db's are imported once)
    access_store = providers.Singleton(_access_store, adapters.access_store, replication)
    access = providers.Singleton(
        _access, settings, access_store, adapters.clock, adapters.audit_log
    )
    grpc_server = providers.Resource(
        _grpc_server,
        settings,
        control_plane,
        observability.event_hub,
        observability.tracer_provider,
        observability.metrics,
        jobs_api,
        access,
        audit_trail,
        run_as,
        services,
    )
    rest_app = providers.Singleton(
        _rest_app,
        settings,
        control_plane,
        observability.metrics,
        observability.tracer_provider,
        adapters.discovery,
        usage,
        jobs_api,
        access,
        audit_trail,
        observability.event_hub,
        run_as,
        model_routes,
        serving_ledger,
        services,
    )
    gateway_server = providers.Resource(  # with gateway_port: the gateway on its own port
        _gateway_server, settings, model_routes, access, observability.metrics, serving_ledger, tls
    )
