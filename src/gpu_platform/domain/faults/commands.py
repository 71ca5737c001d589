"""Cluster-state commands for faults and operations (applied by `ClusterState.apply`).

GPUs are named by node and node-local index; `now` is the proposer's clock in seconds since
the Unix epoch, carried in the command so that applying it is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "AdminAction",
    "CheckNodes",
    "CompleteGpuReset",
    "HardwareRecord",
    "NodeHeartbeat",
    "ReportEcc",
    "ReportGpuLost",
    "ReportThermal",
    "ReportXid",
    "SetGpuAdmin",
    "SetNodeAdmin",
]

AdminAction = Literal["drain", "offline", "online"]


@dataclass(frozen=True, slots=True)
class ReportXid:
    node: str
    gpu_index: int
    xid: int
    now: float


@dataclass(frozen=True, slots=True)
class ReportEcc:
    """Volatile ECC totals and row-remapper flags of one GPU."""

    node: str
    gpu_index: int
    corrected: int
    uncorrected: int
    remap_pending: bool
    remap_failed: bool
    now: float


@dataclass(frozen=True, slots=True)
class ReportThermal:
    node: str
    gpu_index: int
    temperature_c: float
    clock_reasons: int
    now: float


@dataclass(frozen=True, slots=True)
class ReportGpuLost:
    node: str
    gpu_index: int
    now: float
    detail: str = "GPU is lost"


@dataclass(frozen=True, slots=True)
class CompleteGpuReset:
    """The GpuController's reset of a RESETTING GPU finished (`ok`) or failed."""

    node: str
    gpu_index: int
    ok: bool
    now: float
    detail: str = ""


@dataclass(frozen=True, slots=True)
class SetGpuAdmin:
    """Operator action on one GPU. `offline` of a GPU running a job needs `force`."""

    node: str
    gpu_index: int
    action: AdminAction
    reason: str
    now: float
    force: bool = False


@dataclass(frozen=True, slots=True)
class SetNodeAdmin:
    """Operator action on a node. `offline` of a node running jobs needs `force`."""

    node: str
    action: AdminAction
    reason: str
    now: float
    force: bool = False


@dataclass(frozen=True, slots=True)
class NodeHeartbeat:
    node: str
    now: float


@dataclass(frozen=True, slots=True)
class CheckNodes:
    """Judge heartbeat ages at `now`: SUSPECT and DOWN verdicts per the fault policy.

    `silent`, when given, is ((node, seconds without a heartbeat), ...) as a leader that
    tracks heartbeats in memory saw them: only those nodes are judged, by those ages (nodes
    unknown to the state are skipped). None: every node, by the committed heartbeats."""

    now: float
    silent: tuple[tuple[str, float], ...] | None = None


@dataclass(frozen=True, slots=True)
class HardwareRecord:
    """The persisted state of a GPU (`kind` "gpu", `name` its uuid) or node (`kind` "node")."""

    kind: Literal["gpu", "node"]
    name: str
    state: str
    reason: str
    at: float
