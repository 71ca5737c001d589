"""`gpu-platform agent`: run a node agent until SIGINT/SIGTERM.

The node is a simulated profile's (`--sim-profile`, named `--node`) or this host's discovery
(the configuration's inventory settings); its job processes run under the configured
isolation with logs in `<data_dir>/jobs`. GPU resets the leader asks for run on the node's
reset adapter (the simulator for a simulated node, nvidia-smi for NVML GPUs, as
`select_health` picks for a server); `debug inject` scripts reach the simulated hardware when
fault injection is on (`--fault-injection`, or the configuration's `fault_injection`). On a
signal the agent stops its tasks (SIGTERM, grace, SIGKILL) and exits 0; the cluster then sees
the node go silent.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import structlog

from gpu_platform.adapters.inbound.agent_client import AgentClient
from gpu_platform.adapters.inbound.cli import AgentOptions
from gpu_platform.adapters.outbound.serving.replica_probes import ReplicaProbes
from gpu_platform.adapters.outbound.sim import SimulatedHardware
from gpu_platform.adapters.outbound.sim.profiles import ProfileGpuDiscovery
from gpu_platform.application.agent import Agent
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.telemetry import TelemetrySnapshot
from gpu_platform.infrastructure.agent_metrics import agent_registry, serve_agent_metrics
from gpu_platform.infrastructure.bound_ports import forget_ports, report_ports
from gpu_platform.infrastructure.cluster_token import cluster_token
from gpu_platform.infrastructure.config import ConfigError, Settings, load_settings
from gpu_platform.infrastructure.logging import configure_logging
from gpu_platform.infrastructure.replicated import agent_node
from gpu_platform.infrastructure.server import lock_data_dir
from gpu_platform.infrastructure.wiring_node import (
    HealthParts,
    job_isolation,
    process_runner,
    select_discovery,
    select_health,
)
from gpu_platform.infrastructure.wiring_servers import agent_transport, tls_files
from gpu_platform.ports.outbound.gpu_discovery import GpuTelemetry

__all__ = ["run_agent"]

log = structlog.get_logger("gpu_platform.agent")


def run_agent(options: AgentOptions) -> None:
    try:
        settings = load_settings(options.config, data_dir=options.data_dir)
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    if options.fault_injection is not None:
        settings = settings.model_copy(update={"fault_injection": options.fault_injection})
    configure_logging(settings.log_level, settings.log_format)
    try:
        token = cluster_token(settings, server=False)
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    lock = lock_data_dir(settings.data_dir)
    inventory, telemetry, health = _node_hardware(options, settings)
    node = agent_node(inventory, options.address or "127.0.0.1")
    isolation = job_isolation(settings)
    runner_gen = process_runner(settings, isolation, inventory, agent=True)
    runner = next(runner_gen)
    probes = ReplicaProbes(runner, node.name, host=options.address or "127.0.0.1")
    agent = Agent(
        node,
        probes,  # service replicas get a port and health checks
        (*health.monitors, probes.monitor),
        gpu_reset=health.reset,
        injector=health.injector,
        lease=getattr(runner, "fence", None),
    )
    tls = tls_files(settings)
    client = AgentClient(agent, options.servers, token=token, **agent_transport(settings, tls))
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    agent.start()
    client.start()
    if options.metrics_port is not None:
        port = serve_agent_metrics(
            agent_registry(agent, client, telemetry),
            settings.host,
            options.metrics_port,
            token=_metrics_token(settings.agent_metrics_token_file),
        )
        log.info("agent metrics", url=f"http://{settings.host}:{port}/metrics")
        report_ports(settings.data_dir, {"metrics": port})  # --metrics-port 0: the one it got
    log.info("agent running", node=node.name, gpus=len(node.gpus), servers=list(options.servers))
    try:
        done.wait()
    finally:
        log.info("agent stopping", node=node.name)
        client.stop()
        agent.stop(settings.stop_grace_seconds)
        for _ in runner_gen:  # closes the runner
            pass
        forget_ports(settings.data_dir)
        lock.close()


Telemetry = Callable[[], TelemetrySnapshot | None]


def _node_hardware(
    options: AgentOptions, settings: Settings
) -> tuple[Inventory, Telemetry | None, HealthParts]:
    """This node's inventory, its telemetry source, and its monitors, reset adapter and
    injector: a simulated profile's simulator, else what `select_health` picks for the host."""
    name = options.node or socket.gethostname()
    if options.sim_profile:
        try:
            sim = ProfileGpuDiscovery(options.sim_profile, name)
        except (KeyError, ValueError) as exc:
            raise SystemExit(f"error: --sim-profile: {exc}") from None
        inventory = sim.discover()
        hardware = SimulatedHardware(
            inventory, heartbeat_interval_s=settings.health_poll_seconds, heartbeats=False
        )
        injector = hardware if settings.fault_injection else None
        return inventory, sim.snapshot, HealthParts((hardware,), injector, hardware, False)
    discovery = select_discovery(settings)
    inventory = discovery.discover()
    if options.node and inventory.nodes and inventory.nodes[0].name != options.node:
        raise SystemExit(
            f"error: --node {options.node}: this host's inventory names its node "
            f"{inventory.nodes[0].name!r} (--node only names simulated nodes)"
        )
    telemetry = discovery.snapshot if isinstance(discovery, GpuTelemetry) else None
    return inventory, telemetry, select_health(settings, inventory, discovery)


def _metrics_token(path: Path | None) -> str | None:
    """The scrape token in `path` (stripped); none = open. An empty or unreadable file stops
    the start: a typo must not leave the port open."""
    if path is None:
        return None
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise SystemExit(f"error: agent_metrics_token_file {path}: {exc.strerror}") from None
    if not token:
        raise SystemExit(f"error: agent_metrics_token_file {path} is empty")
    return token
