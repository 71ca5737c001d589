"""GPUxGPU and GPUxNIC relations in the vocabulary of `nvidia-smi topo -m`.

A GPU pair's cell is its fabric link when it has one (`NV#` for NVLink bundles, direct or
through the host's NVSwitch fabric; `XG#` for AMD XGMI; `XE#` for Intel Xe Link), otherwise
its PCIe path level (PIX, PXB, PHB, NODE, SYS). Through NVSwitches a pair gets the smaller of
the two GPUs' switch-link counts, as nvidia-smi reports (every DGX A100 pair is NV12).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_platform.domain.model.topology import (
    FabricKind,
    HostTopology,
    LinkLevel,
    PciKind,
    normalize_bus_id,
)
from gpu_platform.domain.topology.pcie import PciIndex

__all__ = ["Cell", "TopologyMatrix", "build_matrix"]

_PREFIX = {FabricKind.NVLINK: "NV", FabricKind.XGMI: "XG", FabricKind.XE_LINK: "XE"}


@dataclass(frozen=True, slots=True)
class Cell:
    """The relation between two devices: PCIe `level`, plus `links` fabric links of `fabric`."""

    level: LinkLevel
    links: int = 0
    fabric: FabricKind | None = None
    bandwidth_mbps: int = 0

    @property
    def label(self) -> str:
        if self.links and self.fabric is not None:
            return f"{_PREFIX[self.fabric]}{self.links}"
        return self.level.label


@dataclass(frozen=True, slots=True)
class TopologyMatrix:
    """Every GPU pair and GPU-NIC pair of one host, indexed by GPU index order `gpus`."""

    node: str
    gpus: tuple[int, ...]
    nics: tuple[str, ...]
    gpu_gpu: tuple[tuple[Cell, ...], ...]
    gpu_nic: tuple[tuple[Cell, ...], ...]
    nic_nic: tuple[tuple[Cell, ...], ...]
    gpu_numa: tuple[int, ...]
    gpu_cpus: tuple[tuple[int, ...], ...]

    def cell(self, a: int, b: int) -> Cell:
        return self.gpu_gpu[self.gpus.index(a)][self.gpus.index(b)]

    def nearest_nics(self, gpu: int) -> tuple[str, ...]:
        """The NICs closest to `gpu` by PCIe level (NCCL's tie set); empty without NICs."""
        if not self.nics:
            return ()
        row = self.gpu_nic[self.gpus.index(gpu)]
        best = min(c.level for c in row)
        return tuple(n for n, c in zip(self.nics, row, strict=True) if c.level == best)


_Bundle = tuple[FabricKind, int, int]  # kind, link count, bandwidth MB/s


def _fabric_counts(topo: HostTopology) -> tuple[dict[frozenset[str], _Bundle], dict[str, _Bundle]]:
    """Direct GPU-GPU link bundles, and per-GPU links into the NVSwitch fabric."""
    switches = {normalize_bus_id(s.id) for s in topo.pci if s.kind is PciKind.NVSWITCH}
    direct: dict[frozenset[str], _Bundle] = {}
    to_switch: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    switch_kind: dict[str, FabricKind] = {}
    for link in topo.links:
        a, b = normalize_bus_id(link.a), normalize_bus_id(link.b)
        if a in switches or b in switches:
            gpu = b if a in switches else a
            to_switch[gpu][0] += link.count
            to_switch[gpu][1] += link.bandwidth_mbps
            switch_kind[gpu] = link.kind
            continue
        key = frozenset((a, b))
        kind, count, bw = direct.get(key, (link.kind, 0, 0))
        direct[key] = (kind, count + link.count, bw + link.bandwidth_mbps)
    via = {g: (switch_kind[g], c, bw) for g, (c, bw) in to_switch.items()}
    return direct, via


def build_matrix(topo: HostTopology, nics: Sequence[str] | None = None) -> TopologyMatrix:
    """The GPUxGPU, GPUxNIC and NICxNIC matrices of `topo` (pure). `nics` restricts the NIC
    columns to those names (default: every NIC)."""
    index = PciIndex(topo)
    gpus = sorted(topo.gpus, key=lambda g: g.index)
    direct, via = _fabric_counts(topo)
    numa = tuple(g.numa_node if g.numa_node >= 0 else index.numa_of(g.pci_bus_id) for g in gpus)
    rows = []
    for i, ga in enumerate(gpus):
        row = []
        for j, gb in enumerate(gpus):
            if i == j:
                row.append(Cell(LinkLevel.SAME_BOARD))
                continue
            a, b = normalize_bus_id(ga.pci_bus_id), normalize_bus_id(gb.pci_bus_id)
            level = index.level(a, b, numa[i], numa[j])
            kind, links, bw = direct.get(frozenset((a, b)), (None, 0, 0))
            if a in via and b in via:
                kind_s, links_a, bw_a = via[a]
                _, links_b, bw_b = via[b]
                kind = kind or kind_s
                links += min(links_a, links_b)
                bw += min(bw_a, bw_b)
            row.append(Cell(level, links, kind, bw))
        rows.append(tuple(row))
    chosen = sorted((n for n in topo.nics if nics is None or n.name in nics), key=lambda n: n.name)
    nic_rows = tuple(
        tuple(Cell(index.level(g.pci_bus_id, n.pci_bus_id, numa[i], n.numa_node)) for n in chosen)
        for i, g in enumerate(gpus)
    )
    nic_nic = tuple(
        tuple(
            Cell(LinkLevel.SAME_BOARD)
            if a.name == b.name
            else Cell(index.level(a.pci_bus_id, b.pci_bus_id, a.numa_node, b.numa_node))
            for b in chosen
        )
        for a in chosen
    )
    cpus_by_numa = {n.id: n.cpus for n in topo.numa_nodes}
    return TopologyMatrix(
        node=topo.node,
        gpus=tuple(g.index for g in gpus),
        nics=tuple(n.name for n in chosen),
        gpu_gpu=tuple(rows),
        gpu_nic=nic_rows,
        nic_nic=nic_nic,
        gpu_numa=numa,
        gpu_cpus=tuple(g.cpus or cpus_by_numa.get(n, ()) for g, n in zip(gpus, numa, strict=True)),
    )
