"""Wiring of what one node runs, shared by the server (container.py) and the agent
(agent_main.py): GPU discovery, health monitors and resets, job isolation and the job runners.
`_`-named factories are container.py's providers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import structlog

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
from gpu_platform.adapters.outbound.process import ProcessJobRunner
from gpu_platform.adapters.outbound.process.fence import ProcessLeaseFence
from gpu_platform.adapters.outbound.serving.replica_probes import ReplicaProbes
from gpu_platform.adapters.outbound.sim import SimulatedHardware
from gpu_platform.adapters.outbound.telemetry_health import TelemetryHealthMonitor
from gpu_platform.application.agent_hub import AgentHub
from gpu_platform.application.mig_jobs import MigJobRunner
from gpu_platform.application.mps_jobs import MpsJobRunner
from gpu_platform.domain.model.gpu import Gpu
from gpu_platform.domain.model.node import Inventory
from gpu_platform.infrastructure.config import ConfigError, Settings
from gpu_platform.infrastructure.containers import container_runner, with_containers
from gpu_platform.ports.outbound.gpu_discovery import GpuDiscovery, GpuTelemetry
from gpu_platform.ports.outbound.gpu_reset import GpuReset
from gpu_platform.ports.outbound.health_monitor import FaultInjector, HealthMonitor
from gpu_platform.ports.outbound.isolation import Isolation, IsolationError
from gpu_platform.ports.outbound.job_runner import JobRunner

__all__ = [
    "HealthParts",
    "job_isolation",
    "mps_controller",
    "process_runner",
    "select_discovery",
    "select_health",
]


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
