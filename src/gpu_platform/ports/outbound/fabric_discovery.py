"""FabricDiscovery: the NICs (RDMA and Ethernet) of this host and its cross-node labels.

`fabric()` returns a NodeFabric: NICs sorted by name with their PCI bus id and NUMA node
(-1 when unknown), and labels such as `rack` and `leaf` that placement uses across nodes.
No NIC is a valid answer (empty tuple). Raises TopologyError only when the source itself is
unreadable. Not required to be thread-safe.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gpu_platform.domain.model.topology import NodeFabric

__all__ = ["FabricDiscovery"]


@runtime_checkable
class FabricDiscovery(Protocol):
    name: str

    def fabric(self) -> NodeFabric: ...
