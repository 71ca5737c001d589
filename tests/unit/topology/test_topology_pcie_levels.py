"""PCIe path levels from the tree, NVSwitch link counting and matrix labels."""

from __future__ import annotations

import pytest

from gpu_platform.domain.model.gpu import Vendor
from gpu_platform.domain.model.node import NumaNode
from gpu_platform.domain.model.topology import (
    FabricKind,
    GpuSite,
    HostTopology,
    Link,
    LinkLevel,
    MeasuredLevel,
    Nic,
    PciKind,
    PciNode,
    normalize_bus_id,
)
from gpu_platform.domain.topology import PciIndex, build_matrix, classify_bridges

B = PciKind.BRIDGE


def tree() -> HostTopology:
    """Two host bridges on NUMA 0, one on NUMA 1.

    hb0 ─ rp 00:01.0 ─ up 01:00.0 ─ down 02:00.0 ─ up 03:00.0 ─ down 04:00.0 ─ GPU 05:00.0
                                   │                          └ down 04:01.0 ─ GPU 06:00.0
                                   │                                        └ NIC 06:00.1
                                   └ down 02:01.0 ─ GPU 07:00.0
        └ rp 00:02.0 ─ GPU 08:00.0
    hb1 (NUMA 0) ─ rp 10:01.0 ─ GPU 11:00.0
    hb2 (NUMA 1) ─ rp 20:01.0 ─ GPU 21:00.0
    """
    nodes = (
        PciNode("hostbridge:0", PciKind.HOST_BRIDGE, None, 0),
        PciNode("0000:00:01.0", B, "hostbridge:0"),
        PciNode("0000:01:00.0", B, "0000:00:01.0"),
        PciNode("0000:02:00.0", B, "0000:01:00.0"),
        PciNode("0000:03:00.0", B, "0000:02:00.0"),
        PciNode("0000:04:00.0", B, "0000:03:00.0"),
        PciNode("0000:05:00.0", PciKind.GPU, "0000:04:00.0"),
        PciNode("0000:04:01.0", B, "0000:03:00.0"),
        PciNode("0000:06:00.0", PciKind.GPU, "0000:04:01.0"),
        PciNode("0000:06:00.1", PciKind.NIC, "0000:04:01.0"),
        PciNode("0000:02:01.0", B, "0000:01:00.0"),
        PciNode("0000:07:00.0", PciKind.GPU, "0000:02:01.0"),
        PciNode("0000:00:02.0", B, "hostbridge:0"),
        PciNode("0000:08:00.0", PciKind.GPU, "0000:00:02.0"),
        PciNode("hostbridge:1", PciKind.HOST_BRIDGE, None, 0),
        PciNode("0000:10:01.0", B, "hostbridge:1"),
        PciNode("0000:11:00.0", PciKind.GPU, "0000:10:01.0"),
        PciNode("hostbridge:2", PciKind.HOST_BRIDGE, None, 1),
        PciNode("0000:20:01.0", B, "hostbridge:2"),
        PciNode("0000:21:00.0", PciKind.GPU, "0000:20:01.0"),
    )
    buses = ["05", "06", "07", "08", "11", "21"]
    return HostTopology(
        node="t",
        numa_nodes=(NumaNode(0, (0, 1)), NumaNode(1, (2, 3))),
        pci=classify_bridges(nodes),
        gpus=tuple(GpuSite(i, f"0000:{b}:00.0", Vendor.NVIDIA, "x") for i, b in enumerate(buses)),
        nics=(Nic("mlx5_0", "0000:06:00.1"),),
    )


def test_bridges_alternate_between_root_ports_and_switch_ports() -> None:
    kinds = {p.id: p.kind for p in tree().pci}
    assert kinds["0000:00:01.0"] is PciKind.ROOT_PORT
    assert kinds["0000:01:00.0"] is PciKind.SWITCH_UP
    assert kinds["0000:02:00.0"] is PciKind.SWITCH_DOWN
    assert kinds["0000:03:00.0"] is PciKind.SWITCH_UP
    assert kinds["0000:04:01.0"] is PciKind.SWITCH_DOWN


@pytest.mark.parametrize(
    ("a", "b", "level"),
    [
        ("0000:05:00.0", "0000:06:00.0", LinkLevel.PIX),  # one leaf switch
        ("0000:06:00.0", "0000:06:00.1", LinkLevel.PIX),  # same downstream port
        ("0000:05:00.0", "0000:07:00.0", LinkLevel.PXB),  # leaf + upper switch
        ("0000:05:00.0", "0000:08:00.0", LinkLevel.PHB),  # only the host bridge in common
        ("0000:05:00.0", "0000:11:00.0", LinkLevel.NODE),  # other host bridge, same NUMA
        ("0000:05:00.0", "0000:21:00.0", LinkLevel.SYS),  # other NUMA node
    ],
)
def test_path_level_follows_the_switches_crossed(a: str, b: str, level: LinkLevel) -> None:
    index = PciIndex(tree())
    assert index.level(a, b) is level
    assert index.level(b, a) is level


def test_a_measured_level_overrides_the_tree() -> None:
    topo = tree()
    measured = HostTopology(
        node="t",
        numa_nodes=topo.numa_nodes,
        pci=topo.pci,
        gpus=topo.gpus,
        measured_levels=(MeasuredLevel("00000000:05:00.0", "0000:21:00.0", LinkLevel.PHB),),
    )
    assert PciIndex(measured).level("0000:05:00.0", "0000:21:00.0") is LinkLevel.PHB


def test_numa_of_a_device_is_inherited_from_its_host_bridge() -> None:
    index = PciIndex(tree())
    assert index.numa_of("0000:05:00.0") == 0
    assert index.numa_of("0000:21:00.0") == 1
    assert index.numa_of("0000:99:00.0") == -1


def test_nvml_bus_ids_normalise_to_sysfs_form() -> None:
    assert normalize_bus_id("00000000:07:00.0") == "0000:07:00.0"
    assert normalize_bus_id("0000:AB:00.1") == "0000:ab:00.1"
    assert normalize_bus_id("07:00.0") == "0000:07:00.0"
    assert normalize_bus_id("10000:e1:00.0") == "10000:e1:00.0"  # Intel VMD domain


def test_matrix_labels_gpu_pairs_and_lists_the_nearest_nic() -> None:
    m = build_matrix(tree())
    assert m.cell(0, 1).label == "PIX"
    assert m.cell(0, 5).label == "SYS"
    assert m.nearest_nics(1) == ("mlx5_0",)
    assert m.gpu_nic[m.gpus.index(0)][0].label == "PIX"
    assert m.gpu_numa == (0, 0, 0, 0, 0, 1)
    assert m.gpu_cpus[5] == (2, 3)


def test_nvswitch_pairs_get_the_smaller_switch_link_count() -> None:
    sw = [PciNode(f"0000:f{i}:00.0", PciKind.NVSWITCH) for i in range(2)]
    gpus = tuple(GpuSite(i, f"0000:0{i}:00.0", Vendor.NVIDIA) for i in range(3))
    links = (
        Link("0000:00:00.0", sw[0].id, FabricKind.NVLINK, 6, 150_000),
        Link("0000:00:00.0", sw[1].id, FabricKind.NVLINK, 6, 150_000),
        Link("0000:01:00.0", sw[0].id, FabricKind.NVLINK, 12, 300_000),
        Link("0000:02:00.0", "0000:01:00.0", FabricKind.NVLINK, 2, 50_000),
    )
    topo = HostTopology(node="n", pci=tuple(sw), gpus=gpus, links=links)
    m = build_matrix(topo)
    assert m.cell(0, 1).label == "NV12"
    assert m.cell(0, 1).bandwidth_mbps == 300_000
    assert m.cell(1, 2).label == "NV2"  # a direct bridge, no switch on GPU2
    assert m.cell(0, 2).label == "SYS"


def test_xgmi_links_render_as_xg() -> None:
    gpus = tuple(GpuSite(i, f"0000:0{i}:00.0", Vendor.AMD) for i in range(2))
    topo = HostTopology(
        node="n",
        gpus=gpus,
        links=(Link("0000:00:00.0", "0000:01:00.0", FabricKind.XGMI, 3),),
    )
    assert build_matrix(topo).cell(0, 1).label == "XG3"


def test_topology_rejects_a_dangling_parent_and_a_ragged_distance_matrix() -> None:
    with pytest.raises(ValueError, match="unknown parent"):
        HostTopology(node="n", pci=(PciNode("a", PciKind.GPU, "nowhere"),))
    with pytest.raises(ValueError, match="distance matrix"):
        HostTopology(node="n", numa_nodes=(NumaNode(0), NumaNode(1)), numa_distances=((10,),))
