"""`gpu-platform topology [--node N] [--xml FILE] [--json]` as a plain function.

    topology_command(node=None, xml=None, as_json=False) -> str

With `xml`: that hwloc file's tree and matrix. Without: this host's real view (the vendor
adapter joined with hwloc/sysfs when a GPU library finds GPUs, else hwloc/sysfs alone) and,
when discovery fell back to a simulated inventory, that inventory's nodes too, marked
SIMULATED. `node` keeps only the host or simulated node of that name. Raises DiscoveryError
(TopologyError for a bad XML) with a message for the operator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpu_platform.adapters.outbound.discovery import JoinedDiscovery, LocalityProbe, detect
from gpu_platform.adapters.outbound.hwloc.probe import HwlocTopologyProbe
from gpu_platform.adapters.outbound.topology_report import render_json, render_text
from gpu_platform.domain.model.node import Inventory, Node
from gpu_platform.domain.model.topology import GpuSite, HostTopology
from gpu_platform.ports.outbound.gpu_discovery import DiscoveryError

__all__ = ["topology_command", "topology_views"]


def _topology_of(node: Node, source: str) -> HostTopology:
    if node.topology is not None:
        return node.topology
    return HostTopology(
        node=node.name,
        source=source,
        numa_nodes=node.numa_nodes,
        gpus=tuple(
            GpuSite(g.index, g.pci_bus_id, g.vendor, g.model, g.uuid, g.numa_node, g.memory_bytes)
            for g in node.gpus
        ),
        labels=node.labels,
    )


def topology_views(
    xml: str | Path | None = None,
    *,
    preference: str = "auto",
    sim_profile: str = "dgx-a100",
    inventory_file: str | Path | None = None,
    sysfs_root: str | Path = "/",
    vendors: dict[str, Any] | None = None,
) -> tuple[list[tuple[str, HostTopology]], Inventory | None]:
    """(title, topology) pairs to show, and the inventory discovery reported (None for xml)."""
    if xml is not None:
        topo = HwlocTopologyProbe(xml).probe()
        return [(f"== {topo.node}: hwloc XML {xml}", topo)], None
    discovery = detect(
        preference,
        inventory_file=inventory_file,
        sim_profile=sim_profile,
        sysfs_root=sysfs_root,
        vendors=vendors,
    )
    inventory = discovery.discover()
    if isinstance(discovery, JoinedDiscovery):
        topo = discovery.probe()
        return [(f"== this host {topo.node} ({topo.source})", topo)], inventory
    locality = LocalityProbe(sysfs_root=sysfs_root)
    local = locality.probe()
    views = [(f"== this host {local.node}: real view ({local.source})", local)]
    if inventory.simulated:
        for n in inventory.nodes:
            title = f"== SIMULATED fallback node {n.name} ({inventory.source})"
            views.append((title, _topology_of(n, inventory.source)))
    return views, inventory


def topology_command(
    node: str | None = None,
    xml: str | Path | None = None,
    as_json: bool = False,
    *,
    preference: str = "auto",
    sim_profile: str = "dgx-a100",
    inventory_file: str | Path | None = None,
    sysfs_root: str | Path = "/",
    vendors: dict[str, Any] | None = None,
) -> str:
    """The operator's topology report as text (tree, NUMA distances, GPU matrix in the style
    of `nvidia-smi topo -m`, GPU-NIC affinity) or as JSON."""
    views, inventory = topology_views(
        xml,
        preference=preference,
        sim_profile=sim_profile,
        inventory_file=inventory_file,
        sysfs_root=sysfs_root,
        vendors=vendors,
    )
    if node is not None:
        chosen = [(t, topo) for t, topo in views if topo.node == node]
        if not chosen:
            known = ", ".join(topo.node for _, topo in views)
            raise DiscoveryError(f"no node {node!r} in this view (known: {known})")
        views = chosen
    header: dict[str, Any] = {}
    if inventory is not None:
        header = {
            "discovery": {
                "source": inventory.source,
                "simulated": inventory.simulated,
                "notes": list(inventory.notes),
            }
        }
    if as_json:
        return render_json([topo for _, topo in views], header)
    lines = []
    if inventory is not None:
        lines.append(
            f"discovery: {inventory.source}{' (SIMULATED)' if inventory.simulated else ''}"
        )
        lines.extend(f"  {n}" for n in inventory.notes)
        lines.append("")
    text = "\n".join(lines) + ("\n" if lines else "")
    return text + "\n".join(render_text(topo, title=title) for title, topo in views)
