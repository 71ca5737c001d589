"""AdminService: operator actions on GPUs and nodes, fault injection, and the audit log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gpu_platform.domain.faults.commands import AdminAction
from gpu_platform.domain.model.audit import AuditRecord
from gpu_platform.domain.model.node import NodeState
from gpu_platform.domain.scheduling.model import Quota

__all__ = ["AdminService", "NodeInfo"]


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    state: NodeState
    reason: str
    gpus: int
    jobs: int


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

    def inject(self, script: str, *, actor: str) -> list[str]: ...

    def nodes(self) -> list[NodeInfo]: ...

    def quotas(self) -> dict[str, Quota]:
        """Every tenant's quota (configured, or set at run time)."""
        ...

    def set_quota(self, tenant: str, quota: Quota | None) -> None:
        """Set a tenant's quota, or remove it with None; stored, effective next cycle."""
        ...

    def audit(self, limit: int = 100) -> list[AuditRecord]: ...
