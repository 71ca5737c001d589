"""ControlPlane's port methods that only hand the call to one collaborator (mixins).

`ControlPlane` (`application.control_plane`) implements `JobService`, `AdminService` and the
agent hub's `AgentListener`; most of their methods delegate, one line each, to a collaborator
in `application.control`. They live here by port, so `control_plane` keeps what it does
itself (construction, submits, the scheduler loop): `JobReads` (job reads and stops:
`control.jobs`), `AgentEndpoints` (agents: `control.agents`) and `AdminMethods` (health
findings and resets: `control.health`; operator actions, nodes, audit: `control.admin`;
cluster membership: `control.membership`). Split from `control_plane` only for size; the
mixins share its attributes and are not used on their own.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from gpu_platform.application.agent_hub import AttemptRef
from gpu_platform.application.control.admin import Admin
from gpu_platform.application.control.agents import Agents
from gpu_platform.application.control.health import Health
from gpu_platform.application.control.jobs import Jobs
from gpu_platform.application.control.leadership import Leadership
from gpu_platform.application.control.membership import Membership
from gpu_platform.domain.cluster_state import ClusterState
from gpu_platform.domain.faults.commands import AdminAction
from gpu_platform.domain.faults.health import HealthEvent
from gpu_platform.domain.model.audit import AuditRecord
from gpu_platform.domain.model.job import Job
from gpu_platform.domain.model.node import Node
from gpu_platform.domain.topology.matrix import TopologyMatrix
from gpu_platform.ports.inbound.admin_service import ClusterInfo, NodeInfo
from gpu_platform.ports.inbound.job_service import ArrayInfo, ClusterStatus, GpuInfo
from gpu_platform.ports.outbound.job_runner import ExitReport

__all__ = ["AdminMethods", "AgentEndpoints", "JobReads"]


class JobReads:
    """Job, array, GPU and cluster reads; cancel, kill, logs (`control.jobs`)."""

    _jobs: Jobs

    def get_array(self, array_id: str) -> ArrayInfo:
        return self._jobs.get_array(array_id)

    def cancel_array(self, array_id: str, reason: str = "cancelled by user") -> ArrayInfo:
        return self._jobs.cancel_array(array_id, reason)

    def _array_info(self, array_id: str) -> ArrayInfo:
        return self._jobs.array_info(array_id)

    def get(self, job_id: str) -> Job:
        return self._jobs.get(job_id)

    def list_jobs(self, state: str | None = None) -> list[Job]:
        return self._jobs.list_jobs(state)

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> Job:
        return self._jobs.cancel(job_id, reason)

    def kill(self, job_id: str, reason: str = "killed by user") -> Job:
        """`cancel` with a zero grace period: the attempt gets SIGKILL at once. On a job
        already cancelled whose attempt is still in its grace period, it escalates: SIGKILL."""
        return self._jobs.kill(job_id, reason)

    def logs(
        self, job_id: str, attempt: int | None = None, tail_bytes: int = 65536, rank: int = 0
    ) -> str:
        return self._jobs.logs(job_id, attempt, tail_bytes, rank)

    def log_from(
        self, job_id: str, attempt: int, offset: int, max_bytes: int = 65536, rank: int = 0
    ) -> tuple[bytes, bool]:
        return self._jobs.log_from(job_id, attempt, offset, max_bytes, rank)

    def gpus(self) -> list[GpuInfo]:
        return self._jobs.gpus()

    def status(self) -> ClusterStatus:
        return self._jobs.status()


class AgentEndpoints:
    """The AgentListener methods (`control.agents`; `accepting` asks `control.leadership`)."""

    _agents: Agents
    _leadership: Leadership

    if TYPE_CHECKING:

        def _on_exit(self, report: ExitReport) -> None: ...

    def accepting(self) -> str | None:
        return self._leadership.accepting()

    def agent_connected(
        self,
        node: Node,
        running: tuple[AttemptRef, ...],
        exited: tuple[ExitReport, ...] = (),
    ) -> None:
        self._agents.agent_connected(node, running, exited)

    def _lost(
        self, job_id: str, epoch: int, ranks: set[int], why: str, *, ended: bool = False
    ) -> None:
        self._agents.lost(job_id, epoch, ranks, why, ended=ended)

    def agent_heartbeat(self, node: str) -> None:
        self._agents.agent_heartbeat(node)

    def agent_finding(self, event: HealthEvent) -> None:
        self._agents.agent_finding(event)

    def agent_exit(self, report: ExitReport) -> None:
        self._on_exit(report)


class AdminMethods:
    """Health findings and resets, the AdminService, cluster membership."""

    _admin: Admin
    _health: Health
    _membership: Membership
    _lock: threading.RLock

    if TYPE_CHECKING:

        @property
        def _state(self) -> ClusterState: ...

    def report_health(self, event: HealthEvent) -> None:
        """A monitor's finding (called from its thread). Never raises: a finding about an
        unknown GPU or node is logged and dropped."""
        self._health.report_health(event)

    def check_nodes(self) -> None:
        """Judge node heartbeat ages now (SUSPECT / DOWN per the fault policy)."""
        self._health.check_nodes()

    def _start_due_resets(self) -> None:
        self._health.start_due_resets()

    # -- AdminService (control.admin) ----------------------------------------------------------

    def gpu_action(
        self,
        node: str,
        gpu_index: int,
        action: AdminAction,
        *,
        reason: str,
        actor: str,
        force: bool = False,
    ) -> None:
        self._admin.gpu_action(node, gpu_index, action, reason=reason, actor=actor, force=force)

    def node_action(
        self, node: str, action: AdminAction, *, reason: str, actor: str, force: bool = False
    ) -> None:
        self._admin.node_action(node, action, reason=reason, actor=actor, force=force)

    def remove_node(self, node: str, *, reason: str, actor: str) -> None:
        """Remove a node that holds no work and whose agent is not connected (it would
        register the node again at once)."""
        self._admin.remove_node(node, reason=reason, actor=actor)

    def inject(self, script: str, *, actor: str) -> list[str]:
        """Run a fault script on the injector (replicated: the leader's, which routes it to
        the agent of the node the script names); InvalidRequest('script', ...) when refused."""
        return self._admin.inject(script, actor=actor)

    def nodes(self) -> list[NodeInfo]:
        return self._admin.nodes()

    def topology(self, node: str) -> TopologyMatrix | None:
        """The `nvidia-smi topo -m` matrix of `node` (None: unknown node or no topology)."""
        return self._admin.topology(node)

    def audit(self, limit: int = 100) -> list[AuditRecord]:
        return self._admin.audit(limit)

    def check_invariants(self) -> None:
        with self._lock:
            self._state.check_invariants()

    # -- cluster membership (control.membership) -----------------------------------------------

    def cluster(self) -> ClusterInfo:
        return self._membership.cluster()

    def add_server(self, server_id: int, address: str, *, actor: str) -> ClusterInfo:
        return self._membership.add_server(server_id, address, actor=actor)

    def remove_server(self, server_id: int, *, actor: str) -> ClusterInfo:
        return self._membership.remove_server(server_id, actor=actor)

    def transfer_leader(self, server_id: int, *, actor: str) -> ClusterInfo:
        return self._membership.transfer_leader(server_id, actor=actor)
