"""Contracts of TopologyProbe and FabricDiscovery."""

from __future__ import annotations

from gpu_platform.domain.model.topology import HostTopology, LinkLevel, NodeFabric, normalize_bus_id
from gpu_platform.domain.topology import build_matrix
from gpu_platform.ports.outbound.fabric_discovery import FabricDiscovery
from gpu_platform.ports.outbound.topology_probe import TopologyProbe

__all__ = ["FabricDiscoveryContract", "TopologyProbeContract"]


class TopologyProbeContract:
    """What every TopologyProbe promises."""

    def make(self) -> TopologyProbe:
        raise NotImplementedError

    def test_it_is_a_topology_probe(self) -> None:
        assert isinstance(self.make(), TopologyProbe)

    def test_probing_twice_gives_equal_topologies(self) -> None:
        probe = self.make()
        first = probe.probe()
        assert isinstance(first, HostTopology)
        assert first == probe.probe()
        assert first.node

    def test_gpu_bus_ids_are_normalised_and_in_the_tree_when_there_is_one(self) -> None:
        topo = self.make().probe()
        ids = {p.id for p in topo.pci}
        for g in topo.gpus:
            assert g.pci_bus_id == normalize_bus_id(g.pci_bus_id)
            if any(p.kind.value == "hostbridge" for p in topo.pci):
                assert g.pci_bus_id in ids

    def test_gpu_numa_nodes_are_known_numa_nodes_or_unknown(self) -> None:
        topo = self.make().probe()
        if not topo.numa_nodes:
            return
        known = {n.id for n in topo.numa_nodes} | {-1}
        assert {g.numa_node for g in topo.gpus} <= known
        assert {n.numa_node for n in topo.nics} <= known

    def test_the_gpu_matrix_is_symmetric(self) -> None:
        m = build_matrix(self.make().probe())
        for i in range(len(m.gpus)):
            assert m.gpu_gpu[i][i].level is LinkLevel.SAME_BOARD
            for j in range(len(m.gpus)):
                assert m.gpu_gpu[i][j] == m.gpu_gpu[j][i]


class FabricDiscoveryContract:
    """What every FabricDiscovery promises."""

    def make(self) -> FabricDiscovery:
        raise NotImplementedError

    def test_it_is_a_fabric_discovery(self) -> None:
        assert isinstance(self.make(), FabricDiscovery)

    def test_nics_are_sorted_unique_and_named(self) -> None:
        fabric = self.make().fabric()
        assert isinstance(fabric, NodeFabric)
        names = [n.name for n in fabric.nics]
        assert names == sorted(names)
        assert len(set(names)) == len(names)
        assert all(n.pci_bus_id and n.kind in ("rdma", "ethernet") for n in fabric.nics)

    def test_asking_twice_gives_equal_answers(self) -> None:
        adapter = self.make()
        assert adapter.fabric() == adapter.fabric()

    def test_labels_are_sorted_key_value_pairs(self) -> None:
        labels = self.make().fabric().labels
        assert list(labels) == sorted(labels)
        assert len({k for k, _ in labels}) == len(labels)
