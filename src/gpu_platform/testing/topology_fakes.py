"""In-memory fakes of TopologyProbe and FabricDiscovery (return what they were given)."""

from __future__ import annotations

from gpu_platform.domain.model.topology import HostTopology, NodeFabric

__all__ = ["StaticFabricDiscovery", "StaticTopologyProbe"]


class StaticTopologyProbe:
    name = "static"

    def __init__(self, topology: HostTopology) -> None:
        self._topology = topology

    def probe(self) -> HostTopology:
        return self._topology


class StaticFabricDiscovery:
    name = "static"

    def __init__(self, fabric: NodeFabric) -> None:
        self._fabric = fabric

    def fabric(self) -> NodeFabric:
        return self._fabric
