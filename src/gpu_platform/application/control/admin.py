"""Admin: operators' GPU and node actions, fault injection, quotas, the audit log, and the
node and topology views (the AdminService side of the control plane).

Operator actions are audited, refused ones too: each is one cluster-state command (an
illegal transition is a Conflict). Quotas configured at start-up are overridden by those set
at run time: stored in the QuotaStore (embedded) or in the replicated state (a command).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

import structlog

from gpu_platform.application.consistency import LeaderElsewhere
from gpu_platform.application.control.shared import LOG_NAME, Shared
from gpu_platform.domain.cluster_state import Command, RemoveNode, SetQuota
from gpu_platform.domain.errors import Conflict, DomainError, IllegalTransition, InvalidRequest
from gpu_platform.domain.faults.commands import AdminAction, SetGpuAdmin, SetNodeAdmin
from gpu_platform.domain.model.audit import AuditRecord
from gpu_platform.domain.scheduling import Quota
from gpu_platform.domain.scheduling.live_view import LiveView
from gpu_platform.domain.topology.matrix import TopologyMatrix
from gpu_platform.ports.inbound.admin_service import NodeInfo
from gpu_platform.ports.outbound.hardware_store import HardwareStore
from gpu_platform.ports.outbound.health_monitor import FaultInjector
from gpu_platform.ports.outbound.quota_store import QuotaStore

__all__ = ["Admin"]

log = structlog.get_logger(LOG_NAME)


class Admin:
    """Operator actions and views. `hardware` keeps the audit log (without it, memory only);
    `injector` enables `inject`; `read_barrier` and `elsewhere` are the leadership's."""

    def __init__(
        self,
        shared: Shared,
        *,
        hardware: HardwareStore | None,
        injector: FaultInjector | None,
        live_view: LiveView,
        quotas: Mapping[str, Quota] | None,
        quota_store: QuotaStore | None,
        read_barrier: Callable[[], None],
        elsewhere: Callable[[], LeaderElsewhere],
    ) -> None:
        self._s = shared
        self._hardware = hardware
        self._injector = injector
        self._live_view = live_view
        self._read_barrier = read_barrier
        self._elsewhere = elsewhere
        self._memory_audit: list[AuditRecord] = []
        self._quota_store = quota_store
        self._quotas = dict(quotas or {})  # configured; stored ones (set at run time) win
        if quota_store is not None:
            self._quotas.update(quota_store.load_quotas())

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
        verb = f"{action} --force" if force else action
        why = f"{verb} by {actor}: {reason}" if reason else f"{verb} by {actor}"
        command = SetGpuAdmin(node, gpu_index, action, why, self._s.now(), force)
        self._admin(command, actor, verb, f"gpu {node}:{gpu_index}", reason)

    def node_action(
        self, node: str, action: AdminAction, *, reason: str, actor: str, force: bool = False
    ) -> None:
        verb = f"{action} --force" if force else action
        why = f"{verb} by {actor}: {reason}" if reason else f"{verb} by {actor}"
        command = SetNodeAdmin(node, action, why, self._s.now(), force)
        self._admin(command, actor, verb, f"node {node}", reason)

    def remove_node(self, node: str, *, reason: str, actor: str) -> None:
        """Remove a node that holds no work and whose agent is not connected (it would
        register the node again at once)."""
        if self._s.hub is not None and node in self._s.hub.connected():
            why = f"node {node}: its agent is connected and would register it again; stop it first"
            self.record(actor, "remove", f"node {node}", reason, f"refused: {why}")
            raise Conflict(why)
        why = f"removed by {actor}: {reason}" if reason else f"removed by {actor}"
        self._admin(RemoveNode(node, why, self._s.now()), actor, "remove", f"node {node}", reason)

    def _admin(self, command: Command, actor: str, verb: str, target: str, reason: str) -> None:
        with self._s.lock:
            try:
                self._s.execute(command)
            except IllegalTransition as exc:
                self.record(actor, verb, target, reason, f"refused: {exc}")
                raise Conflict(str(exc)) from None
            except DomainError as exc:
                self.record(actor, verb, target, reason, f"refused: {exc}")
                raise
            self.record(actor, verb, target, reason, "ok")
        self._s.wake.set()

    def inject(self, script: str, *, actor: str) -> list[str]:
        """Run a fault script on the injector (replicated: the leader's, which routes it to
        the agent of the node the script names); InvalidRequest('script', ...) when refused."""
        if self._s.replication is not None and not self._s.replication.is_leader():
            raise self._elsewhere()
        if self._injector is None:
            self.record(actor, "inject", "debug", script, "refused: injection disabled")
            raise InvalidRequest("script", "fault injection is disabled on this server")
        try:
            lines = self._injector.inject(script)
        except ValueError as exc:
            self.record(actor, "inject", "debug", script, f"refused: {exc}")
            raise InvalidRequest("script", str(exc)) from None
        self.record(actor, "inject", "debug", "; ".join(lines), "ok")
        return lines

    def nodes(self) -> list[NodeInfo]:
        self._read_barrier()
        with self._s.lock:
            jobs = Counter(
                j.allocation.node
                for j in self._s.state.jobs()
                if j.holds_gpus and j.allocation is not None
            )
            return [
                NodeInfo(n.name, n.state, self._s.state.reason(n.name), len(n.gpus), jobs[n.name])
                for n in self._s.state.nodes
            ]

    def topology(self, node: str) -> TopologyMatrix | None:
        """The `nvidia-smi topo -m` matrix of `node` (None: unknown node or no topology)."""
        with self._s.lock:
            found = next((n for n in self._s.state.nodes if n.name == node), None)
            return None if found is None else self._live_view.hardware.matrix(found)

    def audit(self, limit: int = 100) -> list[AuditRecord]:
        if self._hardware is not None:
            return self._hardware.audit(limit)
        with self._s.lock:
            return self._memory_audit[-limit:]

    def record(self, actor: str, action: str, target: str, reason: str, outcome: str) -> None:
        """Append one audit record (and log it)."""
        record = AuditRecord(self._s.now(), actor, action, target, reason, outcome)
        log.info("audit", **{k: getattr(record, k) for k in record.__slots__})
        if self._hardware is not None:
            self._hardware.append_audit(record)
        else:
            with self._s.lock:
                self._memory_audit.append(record)

    # -- quotas ----------------------------------------------------------------------------------

    def quotas(self) -> dict[str, Quota]:
        self._read_barrier()
        with self._s.lock:
            return self.effective_quotas()

    def effective_quotas(self) -> dict[str, Quota]:
        """Configured quotas, overridden by those set at run time (replicated: in the state)."""
        if self._s.replication is None:
            return dict(self._quotas)
        return {**self._quotas, **self._s.state.quotas}

    def set_quota(self, tenant: str, quota: Quota | None) -> None:
        """Set (or with None remove) a tenant's quota; stored, effective next cycle."""
        if self._s.replication is not None:
            self._s.execute(SetQuota(tenant, quota))
            self._s.wake.set()
            return
        with self._s.lock:
            if self._quota_store is not None:
                self._quota_store.save_quota(tenant, quota)
            if quota is None:
                self._quotas.pop(tenant, None)
            else:
                self._quotas[tenant] = quota
        self._s.wake.set()
