"""Entities and value objects: GPUs, nodes, jobs and allocations."""

from gpu_platform.domain.model.gpu import Gpu, GpuState, Vendor
from gpu_platform.domain.model.job import (
    TERMINAL_JOB_STATES,
    Allocation,
    Job,
    JobSpec,
    JobState,
    TaskSlot,
)
from gpu_platform.domain.model.node import Inventory, Node, NodeState, NumaNode
from gpu_platform.domain.model.telemetry import (
    Capability,
    CapabilityStatus,
    GpuReading,
    RemappedRows,
    TelemetrySnapshot,
)
from gpu_platform.domain.model.topology import (
    FabricKind,
    GpuSite,
    HostTopology,
    Link,
    LinkLevel,
    MeasuredLevel,
    Nic,
    NodeFabric,
    Package,
    PciKind,
    PciNode,
)

__all__ = [
    "TERMINAL_JOB_STATES",
    "Allocation",
    "Capability",
    "CapabilityStatus",
    "FabricKind",
    "Gpu",
    "GpuReading",
    "GpuSite",
    "GpuState",
    "HostTopology",
    "Inventory",
    "Job",
    "JobSpec",
    "JobState",
    "Link",
    "LinkLevel",
    "MeasuredLevel",
    "Nic",
    "Node",
    "NodeFabric",
    "NodeState",
    "NumaNode",
    "Package",
    "PciKind",
    "PciNode",
    "RemappedRows",
    "TaskSlot",
    "TelemetrySnapshot",
    "Vendor",
]
