"""Nodes (hosts with GPUs) and the inventory a discovery adapter reports."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpu_platform.domain.model.gpu import Gpu

if TYPE_CHECKING:
    from gpu_platform.domain.model.telemetry import Capability
    from gpu_platform.domain.model.topology import HostTopology

__all__ = ["Inventory", "Node", "NodeState", "NumaNode"]


class NodeState(enum.StrEnum):
    READY = "READY"
    DRAINING = "DRAINING"
    SUSPECT = "SUSPECT"
    DOWN = "DOWN"


@dataclass(frozen=True, slots=True)
class NumaNode:
    """A host NUMA node: its id, the CPU ids local to it and its memory in bytes."""

    id: int
    cpus: tuple[int, ...] = ()
    memory_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Node:
    """A GPU host. GPU indices are unique within the node; `labels` carry rack/switch names.
    `topology` is the host's PCIe/NUMA/fabric model when discovery produced one."""

    name: str
    gpus: tuple[Gpu, ...]
    numa_nodes: tuple[NumaNode, ...] = ()
    cpus: int = 0
    memory_bytes: int = 0
    labels: tuple[tuple[str, str], ...] = ()
    state: NodeState = NodeState.READY
    topology: HostTopology | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("node name must be non-empty")
        indices = [g.index for g in self.gpus]
        if len(set(indices)) != len(indices):
            raise ValueError(f"node {self.name}: duplicate GPU indices {sorted(indices)}")
        for gpu in self.gpus:
            if gpu.node != self.name:
                raise ValueError(f"gpu {gpu.uuid} claims node {gpu.node!r}, not {self.name!r}")

    def gpu(self, index: int) -> Gpu:
        for g in self.gpus:
            if g.index == index:
                return g
        raise KeyError(f"node {self.name} has no GPU index {index}")


@dataclass(frozen=True, slots=True)
class Inventory:
    """What discovery found: the nodes, which adapter found them, and whether they are simulated.
    `capabilities` say what the adapter could and could not do (a missing vendor library, a
    call the hardware does not support)."""

    nodes: tuple[Node, ...]
    source: str
    simulated: bool
    notes: tuple[str, ...] = field(default=())
    capabilities: tuple[Capability, ...] = field(default=())

    def __post_init__(self) -> None:
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate node names in inventory: {sorted(names)}")
        uuids = [g.uuid for n in self.nodes for g in n.gpus]
        if len(set(uuids)) != len(uuids):
            raise ValueError("duplicate GPU uuids in inventory")

    @property
    def gpu_count(self) -> int:
        return sum(len(n.gpus) for n in self.nodes)
