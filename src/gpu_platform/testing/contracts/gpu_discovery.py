"""The GpuDiscovery contract."""

from __future__ import annotations

import pytest

from gpu_platform.domain.model.node import Inventory
from gpu_platform.ports.outbound.gpu_discovery import GpuDiscovery

__all__ = ["GpuDiscoveryContract"]


class GpuDiscoveryContract:
    """Subclass and provide `discovery`."""

    @pytest.fixture
    def discovery(self) -> GpuDiscovery:
        raise NotImplementedError

    def test_it_satisfies_the_port(self, discovery: GpuDiscovery) -> None:
        assert isinstance(discovery, GpuDiscovery)
        assert discovery.name

    def test_discovery_returns_a_consistent_inventory(self, discovery: GpuDiscovery) -> None:
        inventory = discovery.discover()
        assert isinstance(inventory, Inventory)
        assert inventory.source
        for node in inventory.nodes:
            assert len({g.index for g in node.gpus}) == len(node.gpus)
            assert all(g.node == node.name for g in node.gpus)
            assert all(g.memory_bytes >= 0 for g in node.gpus)

    def test_ids_are_stable_across_calls(self, discovery: GpuDiscovery) -> None:
        first, second = discovery.discover(), discovery.discover()
        assert [g.uuid for n in first.nodes for g in n.gpus] == [
            g.uuid for n in second.nodes for g in n.gpus
        ]
        assert first == second

    def test_capabilities_that_are_not_supported_say_why(self, discovery: GpuDiscovery) -> None:
        for cap in discovery.discover().capabilities:
            if not cap.ok:
                assert cap.detail

    def test_a_node_with_a_topology_agrees_with_its_gpus(self, discovery: GpuDiscovery) -> None:
        for node in discovery.discover().nodes:
            if node.topology is None:
                continue
            assert {g.index for g in node.topology.gpus} == {g.index for g in node.gpus}
            assert node.topology.node == node.name
