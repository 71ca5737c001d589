"""Build HostTopology values from `nvidia-smi topo -m`-style descriptions, for tests.

    pairwise_topology("dgx1", gpus=8, levels={(0, 1): "PIX", ...}, default="SYS",
                      nvlinks={(0, 3): 2, ...}, numa=[0, 0, 0, 0, 1, 1, 1, 1])

GPU i gets PCI bus id `0000:{i+0x10:02x}:00.0`; levels become `MeasuredLevel`s (as NVML reports
them), NVLink counts become direct `Link`s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpu_platform.domain.model.gpu import Vendor
from gpu_platform.domain.model.node import NumaNode
from gpu_platform.domain.model.topology import (
    FabricKind,
    GpuSite,
    HostTopology,
    Link,
    LinkLevel,
    MeasuredLevel,
)

__all__ = ["bus_id", "pairwise_topology"]


def bus_id(index: int) -> str:
    return f"0000:{index + 0x10:02x}:00.0"


def pairwise_topology(
    node: str,
    gpus: int,
    levels: Mapping[tuple[int, int], str],
    *,
    default: str = "SYS",
    nvlinks: Mapping[tuple[int, int], int] | None = None,
    numa: Sequence[int] | None = None,
    fabric: FabricKind = FabricKind.NVLINK,
) -> HostTopology:
    numa = list(numa) if numa is not None else [0] * gpus
    measured = []
    for a in range(gpus):
        for b in range(a + 1, gpus):
            label = levels.get((a, b), levels.get((b, a), default))
            measured.append(MeasuredLevel(bus_id(a), bus_id(b), LinkLevel[label]))
    links = tuple(
        Link(bus_id(a), bus_id(b), fabric, count) for (a, b), count in (nvlinks or {}).items()
    )
    return HostTopology(
        node=node,
        source="test",
        numa_nodes=tuple(NumaNode(n) for n in sorted(set(numa))),
        gpus=tuple(
            GpuSite(i, bus_id(i), Vendor.NVIDIA, "test-gpu", numa_node=numa[i]) for i in range(gpus)
        ),
        links=links,
        measured_levels=tuple(measured),
    )
