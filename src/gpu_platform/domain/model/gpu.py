"""A GPU as the scheduler sees it: identity, capacity, locality and lifecycle state."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Gpu", "GpuState", "Vendor"]


class Vendor(enum.StrEnum):
    NVIDIA = "nvidia"
    AMD = "amd"
    INTEL = "intel"


class GpuState(enum.StrEnum):
    """DESIGN §4. ALLOCATED/IN_USE are derived from bound jobs; the rest are health/admin states."""

    AVAILABLE = "AVAILABLE"
    ALLOCATED = "ALLOCATED"
    IN_USE = "IN_USE"
    DRAINING = "DRAINING"
    DEGRADED = "DEGRADED"
    RESETTING = "RESETTING"
    OFFLINE = "OFFLINE"


@dataclass(frozen=True, slots=True)
class Gpu:
    """One physical GPU on a node.

    `index` is the node-local index used in visible-device masks (CUDA_VISIBLE_DEVICES);
    `uuid` is globally unique; `memory_bytes` is total device memory in bytes;
    `numa_node` is the id of the host NUMA node the GPU hangs off (-1 when unknown).
    `state` is the health/admin state (AVAILABLE unless a fault or an operator says otherwise).
    """

    uuid: str
    index: int
    node: str
    vendor: Vendor
    model: str
    memory_bytes: int
    numa_node: int = -1
    pci_bus_id: str = ""
    state: GpuState = GpuState.AVAILABLE

    def __post_init__(self) -> None:
        if self.index < 0:
            raise ValueError(f"gpu index must be >= 0, got {self.index}")
        if self.memory_bytes < 0:
            raise ValueError(f"gpu memory_bytes must be >= 0, got {self.memory_bytes}")
        if not self.uuid:
            raise ValueError("gpu uuid must be non-empty")

    @property
    def schedulable(self) -> bool:
        """True when new work may land on this GPU (its own state permits it)."""
        return self.state is GpuState.AVAILABLE
