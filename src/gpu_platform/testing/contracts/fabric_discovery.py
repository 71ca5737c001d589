"""The FabricDiscovery contract."""

from __future__ import annotations

import pytest

from gpu_platform.domain.model.topology import NodeFabric
from gpu_platform.ports.outbound.fabric_discovery import FabricDiscovery

__all__ = ["FabricDiscoveryContract"]


class FabricDiscoveryContract:
    """Subclass and provide `fabric_discovery`."""

    @pytest.fixture
    def fabric_discovery(self) -> FabricDiscovery:
        raise NotImplementedError

    def test_it_is_a_fabric_discovery(self, fabric_discovery: FabricDiscovery) -> None:
        assert isinstance(fabric_discovery, FabricDiscovery)

    def test_nics_are_sorted_unique_and_named(self, fabric_discovery: FabricDiscovery) -> None:
        fabric = fabric_discovery.fabric()
        assert isinstance(fabric, NodeFabric)
        names = [n.name for n in fabric.nics]
        assert names == sorted(names)
        assert len(set(names)) == len(names)
        assert all(n.pci_bus_id and n.kind in ("rdma", "ethernet") for n in fabric.nics)

    def test_asking_twice_gives_equal_answers(self, fabric_discovery: FabricDiscovery) -> None:
        assert fabric_discovery.fabric() == fabric_discovery.fabric()

    def test_labels_are_sorted_key_value_pairs(self, fabric_discovery: FabricDiscovery) -> None:
        labels = fabric_discovery.fabric().labels
        assert list(labels) == sorted(labels)
        assert len({k for k, _ in labels}) == len(labels)
