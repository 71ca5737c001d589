"""From a HostTopology to the Node the scheduler sees (GPUs, NUMA nodes, CPUs, labels)."""

from __future__ import annotations

from dataclasses import replace

from gpu_platform.domain.model.gpu import Gpu
from gpu_platform.domain.model.node import Node
from gpu_platform.domain.model.topology import HostTopology

__all__ = ["node_from_topology", "with_node_name"]


def with_node_name(topo: HostTopology, name: str) -> HostTopology:
    return topo if topo.node == name else replace(topo, node=name)


def node_from_topology(topo: HostTopology, name: str | None = None) -> Node:
    """A Node whose GPUs are the topology's GPU sites. A GPU without a vendor UUID gets the
    stable id `PCI-<node>-<bus id>`; memory is 0 when the source does not know it."""
    name = name or topo.node
    topo = with_node_name(topo, name)
    gpus = tuple(
        Gpu(
            uuid=g.uuid or f"PCI-{name}-{g.pci_bus_id}",
            index=g.index,
            node=name,
            vendor=g.vendor,
            model=g.model,
            memory_bytes=g.memory_bytes,
            numa_node=g.numa_node,
            pci_bus_id=g.pci_bus_id,
        )
        for g in sorted(topo.gpus, key=lambda g: g.index)
    )
    return Node(
        name=name,
        gpus=gpus,
        numa_nodes=topo.numa_nodes,
        cpus=sum(len(n.cpus) for n in topo.numa_nodes),
        memory_bytes=sum(n.memory_bytes for n in topo.numa_nodes),
        labels=topo.labels,
        topology=topo,
    )
