"""The replicated server's parts (docs/replication.md): Raft, the agent hub, the agents' API,
and the optional in-process agent. `container.py` wires them when `server_id` is set.

Raft between servers uses the server's TLS material when it has one (mutual TLS when
`tls_client_ca_file` is set), like the client APIs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import structlog
from prometheus_client import CollectorRegistry

from gpu_platform.adapters.cluster_identity import cluster_id
from gpu_platform.adapters.inbound.agent_client import AgentClient
from gpu_platform.adapters.inbound.agent_tcp_server import AgentTcpServer
from gpu_platform.adapters.inbound.grpc.agent_service import AgentGrpcServer, AgentServerBase
from gpu_platform.adapters.inbound.local_agent_link import LocalAgentLink
from gpu_platform.adapters.outbound.cpu_priority import RealtimeThreadPriority
from gpu_platform.adapters.outbound.observability import PrometheusRaftMetrics
from gpu_platform.adapters.outbound.raft_grpc import GrpcRaftTransport
from gpu_platform.adapters.outbound.raft_grpc.transport import parse_peers
from gpu_platform.adapters.outbound.raft_storage import SqliteRaftStorage
from gpu_platform.adapters.outbound.raft_tcp import TcpRaftTransport
from gpu_platform.adapters.outbound.serving.replica_probes import ReplicaProbes
from gpu_platform.adapters.tls import TlsFiles
from gpu_platform.application.agent import Agent
from gpu_platform.application.agent_hub import AgentHub
from gpu_platform.application.cluster_replica import ClusterReplica
from gpu_platform.application.raft_node import RaftNode, RaftNodeConfig
from gpu_platform.application.replication import RaftReplication
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.model.audit import AuditRecord
from gpu_platform.domain.model.node import Inventory, Node
from gpu_platform.infrastructure.cluster_token import cluster_token
from gpu_platform.infrastructure.config import ConfigError, Settings
from gpu_platform.infrastructure.wiring_servers import agent_transport
from gpu_platform.ports.outbound.gpu_reset import GpuReset
from gpu_platform.ports.outbound.health_monitor import FaultInjector, HealthMonitor
from gpu_platform.ports.outbound.job_runner import JobRunner

__all__ = [
    "ServerAddresses",
    "advertised",
    "agent_node",
    "running_agent_server",
    "running_local_agent",
    "running_replication",
    "voters",
]

log = structlog.get_logger(__name__)


def voters(settings: Settings) -> dict[int, str]:
    """The Raft voters from `peers` (empty: this server alone, at its advertised host and
    `raft_port`); a ConfigError names what is wrong."""
    if not settings.peers.strip():
        if settings.join:
            raise ConfigError("join: a joining server needs peers with its own Raft address")
        return {settings.server_id: f"{_advertised_host(settings)}:{settings.raft_port}"}
    try:
        peers = parse_peers(settings.peers)
    except ValueError as exc:
        raise ConfigError(f"peers: {exc}") from None
    if not peers:
        raise ConfigError("peers: no voter in it (id=host:port,...)")
    if settings.server_id not in peers:
        raise ConfigError(f"peers: server_id {settings.server_id} is not in {settings.peers!r}")
    return peers


def _advertised_host(settings: Settings) -> str:
    host = settings.advertise_host or settings.host
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


@dataclass(frozen=True, slots=True)
class ServerAddresses:
    http_url: str
    grpc_address: str
    agent_address: str

    def as_tuple(self) -> tuple[str, str, str]:
        return self.http_url, self.grpc_address, self.agent_address


def advertised(
    settings: Settings, tls: TlsFiles | None, ports: tuple[int, int, int]
) -> ServerAddresses:
    """Where clients and agents reach this server: (REST, gRPC, agent) on the advertised host."""
    host = _advertised_host(settings)
    http, grpc_port, agent = ports
    scheme = "https" if tls is not None else "http"
    return ServerAddresses(
        f"{scheme}://{host}:{http}",
        f"{host}:{grpc_port}" if grpc_port > 0 else "",
        f"{host}:{agent}",
    )


def running_replication(
    settings: Settings,
    policy: FaultPolicy,
    tls: TlsFiles | None,
    registry: CollectorRegistry,
    audit: Callable[[AuditRecord], None] | None = None,
) -> Iterator[RaftReplication | None]:
    """Raft (`raft_transport`: gRPC or TCP) with the log in `data_dir/raft.db`; None for the
    embedded mode. `audit` records each refused Raft sender (adapters.member_gate)."""
    if settings.server_id == 0:
        yield None
        return
    peers = voters(settings)
    identity = {
        "member": settings.server_id,
        "cluster": cluster_id(cluster_token(settings, server=True)),
    }
    storage = SqliteRaftStorage(settings.data_dir / "raft.db", identity=identity)
    replica = ClusterReplica(policy, threading.RLock())
    metrics = PrometheusRaftMetrics(registry, settings.server_id)
    config = RaftNodeConfig(
        id=settings.server_id,
        voters=tuple(sorted(peers)),
        tick_interval=settings.raft_tick_seconds,
        election_tick=settings.raft_election_ticks,
        snapshot_entries=settings.raft_snapshot_entries,
        join=settings.join,
    )
    node = RaftNode(
        config,
        storage,
        (TcpRaftTransport if settings.raft_transport == "tcp" else GrpcRaftTransport)(
            settings.server_id,
            peers,
            listen=_raft_listen(settings),
            tls=tls,
            token=cluster_token(settings, server=True),
            audit=audit,
        ),
        replica,
        metrics=metrics,
        priority=RealtimeThreadPriority() if settings.cpu_priority == "realtime" else None,
    )
    metrics.watch(node.status)
    node.start()
    log.info("raft started", server_id=settings.server_id, voters=sorted(peers))
    try:
        yield RaftReplication(node, replica)
    finally:
        node.stop()
        storage.close()


def _raft_listen(settings: Settings) -> str | None:
    """A one-voter cluster listens on `host:raft_port`; with peers, on its entry there."""
    return None if settings.peers.strip() else f"{settings.host}:{settings.raft_port}"


def running_agent_server(
    settings: Settings,
    hub: JobRunner,
    tls: TlsFiles | None,
    audit: Callable[[AuditRecord], None] | None = None,
) -> Iterator[AgentServerBase | None]:
    if settings.server_id == 0 or not isinstance(hub, AgentHub):
        yield None
        return
    kind = AgentTcpServer if settings.agent_transport == "tcp" else AgentGrpcServer
    server = kind(
        hub,
        settings.host,
        settings.agent_port,
        server_id=settings.server_id,
        heartbeat_s=settings.agent_heartbeat_seconds,
        lease_s=settings.agent_lease_seconds,
        token=cluster_token(settings, server=True),
        tls=tls,
        local_socket=local_agent_socket(settings, tls),
        audit=audit,
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def local_agent_socket(settings: Settings, tls: TlsFiles | None) -> Path | None:
    """With TLS on, the in-process agent reaches its own server over `data_dir/agent.sock`
    (mode 0600) rather than TLS on loopback, which would need the CA of the server's own
    certificate; without TLS it dials loopback like any agent."""
    if tls is None or not settings.runs_local_agent:
        return None
    path = settings.data_dir.resolve() / "agent.sock"
    if len(str(path).encode()) >= 104:  # sun_path
        raise ConfigError(
            f"data_dir: {settings.data_dir} is too long a path for the in-process agent's "
            "socket (agent.sock) with TLS on; use a shorter data_dir"
        )
    return path


def agent_node(inventory: Inventory, address: str | None) -> Node:
    """The node an agent registers: the inventory's (first) node with its `address` label,
    which gangs use as their rendezvous host."""
    if not inventory.nodes:
        raise ConfigError("agent: the inventory has no node")
    node = inventory.nodes[0]
    labels = dict(node.labels)
    if address:
        labels["address"] = address
    return replace(node, labels=tuple(sorted(labels.items())))


def running_local_agent(
    settings: Settings,
    inventory: Inventory,
    runner: JobRunner,
    monitors: tuple[HealthMonitor, ...],
    agent_server: AgentServerBase | None,
    tls: TlsFiles | None,
    *,
    gpu_reset: GpuReset | None = None,
    injector: FaultInjector | None = None,
) -> Iterator[Agent | None]:
    """An agent in this process for this host, talking to the cluster like any other (with
    this host's GPU reset adapter and, when enabled, its fault injector)."""
    if not settings.runs_local_agent or agent_server is None:
        yield None
        return
    node = agent_node(inventory, "127.0.0.1")
    lease = getattr(runner, "fence", None)  # process_runner's lease fence, when it made one
    probes = ReplicaProbes(runner, node.name, host="127.0.0.1")  # service replicas
    monitors = (*monitors, probes.monitor)
    agent = Agent(node, probes, monitors, gpu_reset=gpu_reset, injector=injector, lease=lease)
    target = advertised(settings, tls, (settings.port, settings.grpc_port, agent_server.port))
    socket = local_agent_socket(settings, tls)
    own = f"unix:{socket}" if socket is not None else target.agent_address
    link = LocalAgentLink(  # its own server without gRPC; other leaders over gRPC
        agent_server.hub,
        own,
        heartbeat_s=settings.agent_heartbeat_seconds,
        lease_s=settings.agent_lease_seconds,
        claims=agent_server,
    )
    client = AgentClient(
        agent,
        [own],
        token=cluster_token(settings, server=True),
        local=link,
        **agent_transport(settings, tls),
    )
    agent.start()
    client.start()
    try:
        yield agent
    finally:
        client.stop()
        agent.stop(settings.stop_grace_seconds)
