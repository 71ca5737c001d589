"""Operator view of a host topology: a tree plus the `nvidia-smi topo -m`-style matrix, as text
or JSON. Pure functions of a HostTopology; `topology_command` gathers the topologies to show.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from gpu_platform.domain.model.topology import HostTopology, PciKind, PciNode
from gpu_platform.domain.topology import TopologyMatrix, build_matrix

__all__ = ["format_cpus", "matrix_for_display", "render_json", "render_text", "topology_dict"]

_GIB = 1 << 30
_LEGEND = (
    "Legend:",
    "  X    = Self",
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes",
    "  NODE = Connection traversing PCIe and the interconnect between PCIe host bridges "
    "within a NUMA node",
    "  PHB  = Connection traversing PCIe as well as a PCIe host bridge",
    "  PXB  = Connection traversing multiple PCIe switches (without a host bridge)",
    "  PIX  = Connection traversing at most a single PCIe switch",
    "  BRD  = Devices on the same board (NVML_TOPOLOGY_INTERNAL)",
    "  NV#  = Connection traversing a bonded set of # NVLinks (direct or through NVSwitch)",
    "  XG#  = AMD XGMI, # links;  XE# = Intel Xe Link, # links",
)


def format_cpus(cpus: Iterable[int]) -> str:
    """(0, 1, 2, 5, 7, 8) -> '0-2,5,7-8'; '-' for none."""
    ordered = sorted(set(cpus))
    if not ordered:
        return "-"
    parts, start, prev = [], ordered[0], ordered[0]
    for c in [*ordered[1:], None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return ",".join(parts)


def matrix_for_display(topo: HostTopology) -> TopologyMatrix:
    """The matrix with RDMA NICs as columns (what NCCL uses), or no NIC columns without any."""
    rdma = [n.name for n in topo.nics if n.kind == "rdma"]
    return build_matrix(topo, nics=rdma)


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _matrix_lines(topo: HostTopology, m: TopologyMatrix) -> list[str]:
    if not m.gpus:
        return ["GPU matrix: no GPU on this host"]
    gpu_names = [f"GPU{g}" for g in m.gpus]
    header = ["", *gpu_names, *m.nics, "CPU Affinity", "NUMA Affinity"]
    rows = [header]
    for i, name in enumerate(gpu_names):
        cells = ["X" if i == j else c.label for j, c in enumerate(m.gpu_gpu[i])]
        nic_cells = [c.label for c in m.gpu_nic[i]]
        numa = m.gpu_numa[i]
        rows.append(
            [
                name,
                *cells,
                *nic_cells,
                format_cpus(m.gpu_cpus[i]),
                str(numa) if numa >= 0 else "N/A",
            ]
        )
    for k, nic in enumerate(m.nics):
        gpu_cells = [m.gpu_nic[i][k].label for i in range(len(m.gpus))]
        nic_cells = ["X" if k == j else c.label for j, c in enumerate(m.nic_nic[k])]
        rows.append([nic, *gpu_cells, *nic_cells, "", ""])
    lines = _table(rows)
    lines.append("")
    lines.extend(_LEGEND)
    return lines


def _affinity_matrix(topo: HostTopology) -> TopologyMatrix:
    """RDMA NICs when there are any (what NCCL and GPUDirect use), else every NIC."""
    rdma = matrix_for_display(topo)
    return rdma if rdma.nics else build_matrix(topo)


def _affinity_lines(topo: HostTopology) -> list[str]:
    if not topo.gpus:
        return []
    m = _affinity_matrix(topo)
    if not m.nics:
        return ["GPU-NIC affinity: no NIC found"]
    kind = "RDMA NICs" if any(n.kind == "rdma" for n in topo.nics) else "NICs"
    lines = [f"GPU-NIC affinity (nearest {kind} by PCIe path):"]
    for g in m.gpus:
        near = m.nearest_nics(g)
        level = m.gpu_nic[m.gpus.index(g)][m.nics.index(near[0])].label
        lines.append(f"  GPU{g} -> {', '.join(near)} ({level})")
    return lines


def _tree_lines(topo: HostTopology) -> list[str]:
    children: dict[str | None, list[PciNode]] = {}
    for p in topo.pci:
        children.setdefault(p.parent, []).append(p)
    interesting = {PciKind.GPU, PciKind.NIC, PciKind.NVSWITCH}
    keep: set[str] = set()
    by_id = {p.id: p for p in topo.pci}
    for p in topo.pci:
        if p.kind in interesting:
            node: PciNode | None = p
            while node is not None:
                keep.add(node.id)
                node = by_id.get(node.parent) if node.parent else None
    gpu_by_bus = {g.pci_bus_id: g for g in topo.gpus}
    nic_by_bus = {n.pci_bus_id: n for n in topo.nics}

    def describe(p: PciNode) -> str:
        if p.kind is PciKind.GPU and p.id in gpu_by_bus:
            g = gpu_by_bus[p.id]
            return f"GPU{g.index} {p.id} {g.vendor.value} {g.model}".rstrip()
        if p.kind is PciKind.NIC and p.id in nic_by_bus:
            n = nic_by_bus[p.id]
            return f"NIC {n.name} {p.id} ({n.kind})"
        if p.kind is PciKind.NVSWITCH:
            return f"NVSwitch {p.id}"
        if p.kind is PciKind.HOST_BRIDGE:
            return f"HostBridge {p.id.removeprefix('hostbridge:')}"
        return f"{p.kind.value} {p.id} [{p.vendor_id:04x}:{p.device_id:04x}]"

    def walk(p: PciNode, prefix: str, last: bool, out: list[str]) -> None:
        out.append(f"{prefix}{'└─ ' if last else '├─ '}{describe(p)}")
        kids = [c for c in children.get(p.id, []) if c.id in keep]
        hidden = len(children.get(p.id, [])) - len(kids)
        for i, c in enumerate(kids):
            walk(c, prefix + ("   " if last else "│  "), i == len(kids) - 1 and not hidden, out)
        if hidden:
            out.append(f"{prefix}{'   ' if last else '│  '}└─ (+{hidden} other PCI)")

    lines = [f"Machine {topo.node}"]
    hosts = [h for h in children.get(None, []) if h.kind is PciKind.HOST_BRIDGE]
    for pkg in topo.packages:
        model = f" {pkg.model}" if pkg.model else ""
        lines.append(f"├─ Package {pkg.id}{model} (cpus {format_cpus(pkg.cpus)})")
        for k, nid in enumerate(pkg.numa_nodes):
            numa = next((n for n in topo.numa_nodes if n.id == nid), None)
            mem = f", {numa.memory_bytes / _GIB:.1f} GiB" if numa and numa.memory_bytes else ""
            cpus = format_cpus(numa.cpus) if numa else "-"
            branch = "└─" if k == len(pkg.numa_nodes) - 1 else "├─"
            lines.append(f"│  {branch} NUMA {nid} (cpus {cpus}{mem})")
    for numa_id in sorted({h.numa_node for h in hosts}):
        bridges = [h for h in hosts if h.numa_node == numa_id]
        shown = [h for h in bridges if h.id in keep]
        where = f"NUMA {numa_id}" if numa_id >= 0 else "Machine (NUMA unknown)"
        lines.append(f"├─ I/O local to {where}: {len(bridges)} host bridge(s)")
        for i, h in enumerate(shown):
            walk(h, "│  ", i == len(shown) - 1, lines)
    if topo.nvswitches:
        lines.append(f"└─ NVSwitch fabric: {len(topo.nvswitches)} switch(es)")
    return lines


def render_text(topo: HostTopology, *, title: str = "") -> str:
    """The tree, the NUMA distances, the GPU matrix and GPU-NIC affinity of one host."""
    m = matrix_for_display(topo)
    lines = [title or f"== node {topo.node} (source: {topo.source})"]
    lines.extend(f"note: {n}" for n in topo.notes)
    lines.append(
        f"{len(topo.packages)} package(s), {len(topo.numa_nodes)} NUMA node(s), "
        f"{len(topo.gpus)} GPU(s), {len(topo.nics)} NIC(s)"
        + (f", labels {dict(topo.labels)}" if topo.labels else "")
    )
    lines.append("")
    lines.extend(_tree_lines(topo))
    if topo.numa_distances and len(topo.numa_nodes) > 1:
        lines.append("")
        ids = [n.id for n in topo.numa_nodes]
        rows = [["NUMA", *map(str, ids)]]
        rows += [[str(a), *map(str, r)] for a, r in zip(ids, topo.numa_distances, strict=True)]
        lines.extend(_table(rows))
    lines.append("")
    lines.extend(_matrix_lines(topo, m))
    aff = _affinity_lines(topo)
    if aff:
        lines.append("")
        lines.extend(aff)
    return "\n".join(lines) + "\n"


def topology_dict(topo: HostTopology) -> dict[str, Any]:
    """A JSON-ready description: inventory, tree, matrix labels and affinities."""
    m = matrix_for_display(topo)
    full = _affinity_matrix(topo)
    return {
        "node": topo.node,
        "source": topo.source,
        "notes": list(topo.notes),
        "labels": dict(topo.labels),
        "packages": [
            {
                "id": p.id,
                "model": p.model,
                "cpus": format_cpus(p.cpus),
                "numa_nodes": list(p.numa_nodes),
            }
            for p in topo.packages
        ],
        "numa_nodes": [
            {"id": n.id, "cpus": format_cpus(n.cpus), "memory_bytes": n.memory_bytes}
            for n in topo.numa_nodes
        ],
        "numa_distances": [list(r) for r in topo.numa_distances],
        "gpus": [
            {
                "index": g.index,
                "pci_bus_id": g.pci_bus_id,
                "vendor": g.vendor.value,
                "model": g.model,
                "uuid": g.uuid,
                "numa_node": full.gpu_numa[full.gpus.index(g.index)],
                "nearest_nics": list(full.nearest_nics(g.index)),
            }
            for g in sorted(topo.gpus, key=lambda g: g.index)
        ],
        "nics": [
            {
                "name": n.name,
                "pci_bus_id": n.pci_bus_id,
                "kind": n.kind,
                "numa_node": n.numa_node,
                "netdevs": list(n.netdevs),
            }
            for n in topo.nics
        ],
        "nvswitches": [p.id for p in topo.nvswitches],
        "matrix": {
            "columns": [f"GPU{g}" for g in m.gpus] + list(m.nics),
            "rows": {
                f"GPU{g}": ["X" if i == j else c.label for j, c in enumerate(m.gpu_gpu[i])]
                + [c.label for c in m.gpu_nic[i]]
                for i, g in enumerate(m.gpus)
            },
        },
        "pci": [
            {"id": p.id, "kind": p.kind.value, "parent": p.parent, "numa_node": p.numa_node}
            for p in topo.pci
        ],
    }


def render_json(topos: Sequence[HostTopology], extra: dict[str, Any] | None = None) -> str:
    return json.dumps({**(extra or {}), "hosts": [topology_dict(t) for t in topos]}, indent=2)
