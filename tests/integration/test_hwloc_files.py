"""The twelve real hwloc topologies in ../shared parse, and what they say is what we read.

Facts asserted here were read from the XML files themselves (see SOURCE.md beside them).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.hwloc.probe import HwlocTopologyProbe
from gpu_platform.adapters.outbound.topology_command import topology_command
from gpu_platform.domain.model.gpu import Vendor
from gpu_platform.domain.model.topology import HostTopology, LinkLevel, PciKind
from gpu_platform.domain.topology import build_matrix
from gpu_platform.testing.system import require_shared

FILES = [
    "16amd64-4distances.xml",
    "16intel64-manyVFs.xml",
    "192em64t-24n8c2t.xml",
    "24em64t-2n6c2t-pci.xml",
    "28intel64-2p2g7c-CoDgroups.v1tov2.xml",
    "32em64t-2n8c2t-pci-normalio.xml",
    "64intel64-3g2n+2n-irregulargroups+pci.xml",
    "96em64t-4n4d3ca2co-pci.xml",
    "devel09-pci.xml",
    "memorysidecaches.xml",
    "nvidiaDGX2.xml",
    "power8gpudistances.xml",
]

# file -> (NUMA nodes, packages, GPUs, NICs, RDMA NIC names)
FACTS = {
    "16amd64-4distances.xml": (8, 8, 0, 0, ()),
    "16intel64-manyVFs.xml": (2, 2, 0, 18, ("usnic_0", "usnic_1", "usnic_2")),
    "192em64t-24n8c2t.xml": (24, 24, 0, 7, ("mlx4_0",)),
    "24em64t-2n6c2t-pci.xml": (2, 2, 3, 3, ("mlx4_0",)),
    "28intel64-2p2g7c-CoDgroups.v1tov2.xml": (4, 2, 0, 2, ()),
    "32em64t-2n8c2t-pci-normalio.xml": (2, 2, 4, 3, ("mlx5_0",)),
    "64intel64-3g2n+2n-irregulargroups+pci.xml": (8, 8, 2, 2, ()),
    "96em64t-4n4d3ca2co-pci.xml": (4, 16, 0, 8, ()),
    "devel09-pci.xml": (2, 2, 0, 3, ()),
    "memorysidecaches.xml": (4, 2, 0, 0, ()),
    "nvidiaDGX2.xml": (2, 2, 16, 0, ()),
    "power8gpudistances.xml": (2, 2, 4, 0, ()),
}


def load(name: str) -> HostTopology:
    return HwlocTopologyProbe(require_shared("topologies", "hwloc", name)).probe()


def test_every_shared_file_is_listed_here() -> None:
    directory = require_shared("topologies", "hwloc")
    assert sorted(p.name for p in Path(directory).glob("*.xml")) == sorted(FILES)


@pytest.mark.parametrize("name", FILES)
def test_each_file_parses_with_the_counts_read_from_it(name: str) -> None:
    topo = load(name)
    numa, packages, gpus, nics, rdma = FACTS[name]
    assert len(topo.numa_nodes) == numa
    assert len(topo.packages) == packages
    assert len(topo.gpus) == gpus
    assert len(topo.nics) == nics
    assert tuple(n.name for n in topo.nics if n.kind == "rdma") == rdma
    # Every NUMA node belongs to some package, and every GPU to a NUMA node when known.
    owned = {n for p in topo.packages for n in p.numa_nodes}
    assert owned == {n.id for n in topo.numa_nodes}
    matrix = build_matrix(topo)
    assert len(matrix.gpu_gpu) == gpus


@pytest.mark.parametrize("name", FILES)
def test_each_file_renders_as_text_and_json(name: str) -> None:
    path = str(require_shared("topologies", "hwloc", name))
    text = topology_command(xml=path)
    assert text.startswith("== ") and "Machine " in text
    (host,) = json.loads(topology_command(xml=path, as_json=True))["hosts"]
    assert len(host["gpus"]) == FACTS[name][2]
    assert len(host["matrix"]["rows"]) == FACTS[name][2]


def test_dgx2_has_sixteen_v100s_split_over_two_numa_nodes() -> None:
    topo = load("nvidiaDGX2.xml")
    assert {g.vendor for g in topo.gpus} == {Vendor.NVIDIA}
    assert {g.model for g in topo.gpus} == {"Tesla V100-SXM3-32GB-H"}
    assert [g.numa_node for g in topo.gpus] == [0] * 8 + [1] * 8
    assert topo.gpu(0).uuid == "GPU-d3977428-7a30-086b-2e20-5c1eeed647c6"
    assert topo.gpu(0).pci_bus_id == "0000:34:00.0"
    assert topo.numa_distance(0, 1) == 21


def test_dgx2_pcie_tree_puts_two_gpus_on_each_leaf_switch() -> None:
    topo = load("nvidiaDGX2.xml")
    m = build_matrix(topo)
    assert m.cell(0, 1).level is LinkLevel.PIX  # 34:00.0 and 36:00.0 under switch 32:00.0
    assert m.cell(0, 2).level is LinkLevel.PXB  # through the upper switch 2c:00.0
    assert m.cell(0, 4).level is LinkLevel.NODE  # other host bridge, same socket
    assert m.cell(0, 8).level is LinkLevel.SYS  # other socket
    leaf_pairs = [(i, i + 1) for i in range(0, 16, 2)]
    assert all(m.cell(a, b).level is LinkLevel.PIX for a, b in leaf_pairs)
    switch_ports = [p for p in topo.pci if p.kind in (PciKind.SWITCH_UP, PciKind.SWITCH_DOWN)]
    assert {p.vendor_id for p in switch_ports} == {0x10B5}  # PLX
    assert len(switch_ports) == 52  # SOURCE.md: 52 PLX switch ports


def test_dgx2_every_gpu_pair_is_nv6_through_twelve_nvswitches() -> None:
    topo = load("nvidiaDGX2.xml")
    assert len(topo.nvswitches) == 12
    m = build_matrix(topo)
    labels = {m.cell(a, b).label for a in range(16) for b in range(16) if a != b}
    assert labels == {"NV6"}
    assert m.cell(0, 15).bandwidth_mbps == 6 * 25_000


def test_power8_pairs_gpus_by_nvlink_and_sees_nvlink_to_the_cpu() -> None:
    topo = load("power8gpudistances.xml")
    m = build_matrix(topo)
    assert m.cell(0, 1).label == "NV2"
    assert m.cell(2, 3).label == "NV2"
    assert m.cell(0, 2).label == "SYS"
    assert any(link.b.startswith("cpu:") or link.a.startswith("cpu:") for link in topo.links)
    assert topo.numa_distance(0, 1) == 40


def test_sl390_has_one_gpu_on_the_hca_socket_and_two_on_the_other() -> None:
    topo = load("24em64t-2n6c2t-pci.xml")
    assert [g.numa_node for g in topo.gpus] == [0, 1, 1]
    (hca,) = [n for n in topo.nics if n.kind == "rdma"]
    assert hca.numa_node == 0
    m = build_matrix(topo, nics=["mlx4_0"])
    assert [c.label for row in m.gpu_nic for c in row] == ["PHB", "SYS", "SYS"]


def test_supermicro_mixes_nvidia_and_amd_and_flags_its_duplicated_bus_id() -> None:
    topo = load("32em64t-2n8c2t-pci-normalio.xml")
    assert [g.vendor for g in topo.gpus] == [Vendor.NVIDIA] * 3 + [Vendor.AMD]
    assert topo.gpu(2).model == "Tesla K40m"  # the CUDA OS device wins over the PCI name
    assert any("appears twice" in n for n in topo.notes)


def test_sgi_uv_spreads_gpus_over_pci_domains_and_numa_nodes() -> None:
    topo = load("64intel64-3g2n+2n-irregulargroups+pci.xml")
    assert [g.pci_bus_id[:4] for g in topo.gpus] == ["0002", "0004"]
    assert len(topo.numa_distances) == 8
    assert build_matrix(topo).cell(0, 1).level is LinkLevel.SYS


def test_large_uv_reads_its_24_by_24_latency_matrix() -> None:
    topo = load("192em64t-24n8c2t.xml")
    assert len(topo.numa_distances) == 24
    assert all(topo.numa_distances[i][i] == 10 for i in range(24))
    assert sum(len(n.cpus) for n in topo.numa_nodes) == 384


def test_sub_numa_clustering_puts_two_numa_nodes_in_each_package() -> None:
    topo = load("memorysidecaches.xml")
    assert [p.numa_nodes for p in topo.packages] == [(0, 2), (1, 3)]
    assert sum(len(n.cpus) for n in topo.numa_nodes) == 80
    assert topo.numa_distance(0, 2) == 11


def test_server_bmc_vga_is_not_counted_as_a_gpu() -> None:
    topo = load("96em64t-4n4d3ca2co-pci.xml")
    assert topo.gpus == ()
    vga = [p for p in topo.pci if p.pci_class == 0x0300]
    assert [(p.vendor_id, p.device_id) for p in vga] == [(0x1002, 0x515E)]
