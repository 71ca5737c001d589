"""sysfs implementations of TopologyProbe, GpuDiscovery and FabricDiscovery."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpu_platform.adapters.outbound.sysfs.scan import scan_sysfs
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.model.telemetry import Capability, CapabilityStatus
from gpu_platform.domain.model.topology import HostTopology, NodeFabric
from gpu_platform.domain.topology.inventory import node_from_topology

__all__ = ["SysfsFabricDiscovery", "SysfsGpuDiscovery", "SysfsTopologyProbe"]


class SysfsTopologyProbe:
    """Implements TopologyProbe by reading sysfs under `root` ("/" on a real host)."""

    name = "sysfs"

    def __init__(
        self, root: str | Path = "/", *, node: str = "", labels: tuple[tuple[str, str], ...] = ()
    ) -> None:
        self._root = Path(root)
        self._node = node
        self._labels = labels

    def probe(self) -> HostTopology:
        topo = scan_sysfs(self._root, self._node)
        if self._labels:
            topo = replace(
                topo, labels=tuple(sorted((dict(topo.labels) | dict(self._labels)).items()))
            )
        return topo


class SysfsGpuDiscovery:
    """Implements GpuDiscovery from the PCI bus alone: GPUs are display-class functions of
    NVIDIA/AMD/Intel, with stable `PCI-<node>-<bdf>` ids and unknown memory. Used when no
    vendor library is present; reports that as a capability."""

    name = "sysfs"

    def __init__(self, probe: SysfsTopologyProbe | None = None) -> None:
        self._probe = probe or SysfsTopologyProbe()

    def discover(self) -> Inventory:
        topo = self._probe.probe()
        node = node_from_topology(topo)
        found = len(node.gpus)
        note = (
            f"sysfs: {found} GPU(s) seen on the PCI bus (no vendor library: memory unknown)"
            if found
            else "sysfs: no GPU on the PCI bus (display-class NVIDIA/AMD/Intel functions)"
        )
        return Inventory(
            (node,),
            source=self.name,
            simulated=False,
            notes=(note,),
            capabilities=(
                Capability(
                    "sysfs.pci",
                    CapabilityStatus.SUPPORTED,
                    f"{len(topo.pci)} PCI nodes, {len(topo.numa_nodes)} NUMA node(s)",
                ),
            ),
        )


class SysfsFabricDiscovery:
    """Implements FabricDiscovery from /sys/class/infiniband and /sys/class/net."""

    name = "sysfs"

    def __init__(self, probe: SysfsTopologyProbe | None = None) -> None:
        self._probe = probe or SysfsTopologyProbe()

    def fabric(self) -> NodeFabric:
        topo = self._probe.probe()
        return NodeFabric(topo.node, topo.nics, topo.labels, source=topo.source)
