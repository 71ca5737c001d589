"""AdminService: operator actions on GPUs and nodes, fault injection, and the audit log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gpu_platform.domain.faults.commands import AdminAction
from gpu_platform.domain.model.audit import AuditRecord
from gpu_platform.domain.model.node import NodeState
from gpu_platform.domain.scheduling.model import Quota

__all__ = ["AdminService", "ClusterInfo", "NodeInfo", "ServerInfo"]


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    state: NodeState
    reason: str
    gpus: int
    jobs: int


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """A control-plane server: its Raft id and where its APIs listen ('' if not announced)."""

    id: int
    voter: bool
    http_url: str = ""
    grpc_address: str = ""
    agent_address: str = ""


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """The control plane as this server sees it. `mode` is "embedded" (one process, no Raft)
    or "replicated"; `agents` maps each node whose agent streams to this leader to the
    seconds since it last spoke."""

    mode: str
    server_id: int
    role: str
    term: int
    leader_id: int | None
    commit: int
    applied: int
    servers: tuple[ServerInfo, ...]
    agents: dict[str, float]


@runtime_checkable
class AdminService(Protocol):
    """Drain, offline and online GPUs and nodes; inject faults; read the audit log.

    Every action is recorded in the audit log with `actor` and `reason`, whether it was carried
    out or refused. Errors: `NotFound` (unknown node or GPU), `Conflict` (offline without
    `force` of a GPU/node running jobs; an action the state table forbids, e.g. online while a
    reset runs), `InvalidRequest` (a malformed injection script, or injection disabled).
    Thread-safe.
    """

    def gpu_action(
        self,
        node: str,
        gpu_index: int,
        action: AdminAction,
        *,
        reason: str,
        actor: str,
        force: bool = False,
    ) -> None: ...

    def node_action(
        self, node: str, action: AdminAction, *, reason: str, actor: str, force: bool = False
    ) -> None: ...

    def remove_node(self, node: str, *, reason: str, actor: str) -> None:
        """Remove `node` from the cluster for good. Errors: NotFound; Conflict while it holds
        work (jobs on its GPUs, attempts being stopped) or its agent is connected."""
        ...

    def inject(self, script: str, *, actor: str) -> list[str]: ...

    def nodes(self) -> list[NodeInfo]: ...

    def quotas(self) -> dict[str, Quota]:
        """Every tenant's quota (configured, or set at run time)."""
        ...

    def set_quota(self, tenant: str, quota: Quota | None) -> None:
        """Set a tenant's quota, or remove it with None; stored, effective next cycle."""
        ...

    def audit(self, limit: int = 100) -> list[AuditRecord]: ...

    def cluster(self) -> ClusterInfo:
        """This server's view of the control plane (never redirected: any server answers)."""
        ...

    def add_server(self, server_id: int, address: str, *, actor: str) -> ClusterInfo:
        """Add a voter (its Raft `address` host:port); the leader only. Errors:
        InvalidRequest (bad id/address, embedded mode), Conflict (already a member, or
        another change is in progress)."""
        ...

    def remove_server(self, server_id: int, *, actor: str) -> ClusterInfo:
        """Remove a voter (the leader may remove itself: it steps down after)."""
        ...

    def transfer_leader(self, server_id: int, *, actor: str) -> ClusterInfo:
        """Ask the leader to hand over to `server_id`; returns once it has, or raises
        Conflict when it did not within a few election timeouts."""
        ...
