"""The TopologyProbe contract."""

from __future__ import annotations

import pytest

from gpu_platform.domain.model.topology import HostTopology, LinkLevel, PciKind, normalize_bus_id
from gpu_platform.domain.topology import build_matrix
from gpu_platform.ports.outbound.topology_probe import TopologyProbe

__all__ = ["TopologyProbeContract"]


class TopologyProbeContract:
    """Subclass and provide `probe`."""

    @pytest.fixture
    def probe(self) -> TopologyProbe:
        raise NotImplementedError

    def test_it_is_a_topology_probe(self, probe: TopologyProbe) -> None:
        assert isinstance(probe, TopologyProbe)

    def test_probing_twice_gives_equal_topologies(self, probe: TopologyProbe) -> None:
        first = probe.probe()
        assert isinstance(first, HostTopology)
        assert first == probe.probe()
        assert first.node

    def test_gpu_bus_ids_are_normalised_and_in_the_tree_when_there_is_one(
        self, probe: TopologyProbe
    ) -> None:
        topo = probe.probe()
        ids = {p.id for p in topo.pci}
        has_tree = any(p.kind is PciKind.HOST_BRIDGE for p in topo.pci)
        for g in topo.gpus:
            assert g.pci_bus_id == normalize_bus_id(g.pci_bus_id)
            if has_tree:
                assert g.pci_bus_id in ids

    def test_gpu_numa_nodes_are_known_numa_nodes_or_unknown(self, probe: TopologyProbe) -> None:
        topo = probe.probe()
        if not topo.numa_nodes:
            return
        known = {n.id for n in topo.numa_nodes} | {-1}
        assert {g.numa_node for g in topo.gpus} <= known
        assert {n.numa_node for n in topo.nics} <= known

    def test_the_gpu_matrix_is_symmetric(self, probe: TopologyProbe) -> None:
        m = build_matrix(probe.probe())
        for i in range(len(m.gpus)):
            assert m.gpu_gpu[i][i].level is LinkLevel.SAME_BOARD
            for j in range(len(m.gpus)):
                assert m.gpu_gpu[i][j] == m.gpu_gpu[j][i]
