"""Pure computations over `HostTopology`: PCIe path levels, the GPUxGPU / GPUxNIC matrix,
set affinity and NVIDIA's besteffort baseline."""

from gpu_platform.domain.topology.affinity import (
    LINK_POINTS,
    PCIE_POINTS,
    SetAffinity,
    best_effort,
    distance,
    pair_score,
    set_affinity,
)
from gpu_platform.domain.topology.cross_node import NodeLevel, gang_spread, node_level
from gpu_platform.domain.topology.matrix import Cell, TopologyMatrix, build_matrix
from gpu_platform.domain.topology.pcie import PciIndex, classify_bridges

__all__ = [
    "LINK_POINTS",
    "PCIE_POINTS",
    "Cell",
    "NodeLevel",
    "PciIndex",
    "SetAffinity",
    "TopologyMatrix",
    "best_effort",
    "build_matrix",
    "classify_bridges",
    "distance",
    "gang_spread",
    "node_level",
    "pair_score",
    "set_affinity",
]
