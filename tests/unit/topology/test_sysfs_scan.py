"""The sysfs adapter on a fake sysfs tree, and for real on this machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.sysfs import (
    SysfsFabricDiscovery,
    SysfsGpuDiscovery,
    SysfsTopologyProbe,
    parse_cpulist,
    scan_sysfs,
)
from gpu_platform.domain.model.gpu import Vendor
from gpu_platform.domain.model.topology import LinkLevel
from gpu_platform.domain.topology import build_matrix
from gpu_platform.ports.outbound.topology_probe import TopologyError
from gpu_platform.testing.fake_sysfs import FakeSysfs, two_socket_gpu_host


def test_cpulists_expand_ranges_and_singles() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpulist("") == ()


def test_fake_two_socket_host_is_read_with_its_switches_numa_and_nics(tmp_path: Path) -> None:
    two_socket_gpu_host(tmp_path)
    topo = scan_sysfs(tmp_path)
    assert topo.node == "fakehost"
    assert [g.pci_bus_id for g in topo.gpus] == [
        "0000:03:00.0",
        "0000:04:00.0",
        "0000:83:00.0",
        "0000:84:00.0",
    ]
    assert {g.vendor for g in topo.gpus} == {Vendor.NVIDIA}  # the ASPEED VGA is not a GPU
    assert [g.numa_node for g in topo.gpus] == [0, 0, 1, 1]
    assert [(p.id, p.numa_nodes, p.cpus) for p in topo.packages] == [
        (0, (0,), (0, 1, 2, 3)),
        (1, (1,), (4, 5, 6, 7)),
    ]
    assert topo.numa_distances == ((10, 21), (21, 10))
    assert topo.numa_nodes[0].memory_bytes == 64 << 30
    m = build_matrix(topo)
    assert m.cell(0, 1).level is LinkLevel.PIX
    assert m.cell(0, 2).level is LinkLevel.SYS
    assert [m.nearest_nics(g) for g in m.gpus] == [("mlx5_0",)] * 2 + [("mlx5_1",)] * 2
    (nic,) = [n for n in topo.nics if n.name == "mlx5_1"]
    assert (nic.numa_node, nic.state, nic.link_layer) == (1, "4: ACTIVE", "InfiniBand")


def test_gpu_discovery_from_sysfs_gives_stable_pci_ids(tmp_path: Path) -> None:
    two_socket_gpu_host(tmp_path)
    discovery = SysfsGpuDiscovery(SysfsTopologyProbe(tmp_path))
    inv = discovery.discover()
    assert inv == discovery.discover()
    assert not inv.simulated
    (node,) = inv.nodes
    assert node.gpus[0].uuid == "PCI-fakehost-0000:03:00.0"
    assert node.topology is not None and len(node.topology.gpus) == 4
    assert node.cpus == 8


def test_fabric_discovery_lists_rdma_and_ethernet_nics_with_labels(tmp_path: Path) -> None:
    fs = two_socket_gpu_host(tmp_path)
    fs.pci(["0000:00:1d.0", "0000:0a:00.0"], cls=0x020000, vendor=0x8086, device=0x1521, numa=0)
    fs.net("eno1", "0000:0a:00.0")
    probe = SysfsTopologyProbe(tmp_path, labels=(("rack", "r7"),))
    fabric = SysfsFabricDiscovery(probe).fabric()
    assert [(n.name, n.kind) for n in fabric.nics] == [
        ("eno1", "ethernet"),
        ("mlx5_0", "rdma"),
        ("mlx5_1", "rdma"),
    ]
    assert fabric.label("rack") == "r7"


def test_a_host_without_numa_directories_has_one_numa_node(tmp_path: Path) -> None:
    FakeSysfs(tmp_path)
    (tmp_path / "sys/devices/system/node").rmdir()
    (tmp_path / "sys/devices/system/cpu").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/online").write_text("0-1\n")
    topo = scan_sysfs(tmp_path)
    assert [(n.id, n.cpus) for n in topo.numa_nodes] == [(0, (0, 1))]
    assert topo.gpus == ()


def test_a_root_without_sysfs_is_a_topology_error(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="sysfs mounted"):
        scan_sysfs(tmp_path)


def test_this_machine_is_read_for_real_and_says_it_has_no_gpu() -> None:
    if not Path("/sys/devices/system").is_dir():
        pytest.skip("not a Linux host with sysfs")
    inv = SysfsGpuDiscovery().discover()
    (node,) = inv.nodes
    assert node.topology is not None
    assert len(node.topology.numa_nodes) >= 1
    assert node.cpus >= 1
    if not node.gpus:
        assert "no GPU" in inv.notes[0]
