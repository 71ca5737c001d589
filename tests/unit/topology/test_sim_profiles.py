"""Named simulated machines: shapes from the real machines they imitate, stable ids."""

from __future__ import annotations

import pytest

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.adapters.outbound.sim.profiles import (
    PROFILES,
    ProfileGpuDiscovery,
    profile_node,
    profile_topology,
)
from gpu_platform.domain.model.gpu import Vendor
from gpu_platform.domain.model.topology import LinkLevel
from gpu_platform.domain.topology import build_matrix, set_affinity
from gpu_platform.ports.outbound.gpu_discovery import DiscoveryError
from gpu_platform.testing.system import require_shared


def labels(profile: str) -> set[str]:
    m = build_matrix(profile_topology(profile))
    return {m.cell(a, b).label for a in m.gpus for b in m.gpus if a != b}


def test_dgx_a100_matches_the_real_topo_matrix_and_the_default_node() -> None:
    topo = profile_topology("dgx-a100")
    assert labels("dgx-a100") == {"NV12"}
    m = build_matrix(topo)
    assert m.nearest_nics(0) == ("mlx5_0", "mlx5_1")
    assert m.gpu_nic[0][0].level is LinkLevel.PXB
    node = profile_node("dgx-a100")
    default = default_node()
    assert [(g.uuid, g.numa_node) for g in node.gpus] == [
        (g.uuid, g.numa_node) for g in default.gpus
    ]


def test_dgx_h100_has_nv18_and_one_pix_nic_per_gpu() -> None:
    assert labels("dgx-h100") == {"NV18"}
    m = build_matrix(profile_topology("dgx-h100"))
    assert [m.nearest_nics(g) for g in m.gpus] == [(f"mlx5_{i}",) for i in range(8)]


def test_hgx_pcie_puts_four_gpus_behind_each_switch_of_two_numa_nodes() -> None:
    m = build_matrix(profile_topology("hgx-8x-pcie"))
    assert m.cell(0, 3).level is LinkLevel.PIX
    assert m.cell(3, 4).level is LinkLevel.SYS
    assert m.gpu_numa == (0, 0, 0, 0, 1, 1, 1, 1)
    assert set_affinity(m, [0, 1, 2, 3]).nic_local


def test_mixed_vendor_node_holds_three_vendors_and_both_fabrics() -> None:
    topo = profile_topology("mixed-vendor")
    assert [g.vendor for g in topo.gpus] == [Vendor.NVIDIA] * 2 + [Vendor.AMD] * 2 + [Vendor.INTEL]
    m = build_matrix(topo)
    assert (m.cell(0, 1).label, m.cell(2, 3).label, m.cell(1, 2).label) == ("NV12", "XG3", "SYS")


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_profiles_are_deterministic(profile: str) -> None:
    assert profile_topology(profile, "x") == profile_topology(profile, "x")
    assert (
        ProfileGpuDiscovery(profile, "x").discover() == ProfileGpuDiscovery(profile, "x").discover()
    )


def test_any_hwloc_xml_is_a_profile() -> None:
    xml = require_shared("topologies", "hwloc", "power8gpudistances.xml")
    node = profile_node(f"hwloc:{xml}", "minsky")
    assert node.name == "minsky" and len(node.gpus) == 4
    assert node.gpus[0].uuid == "GPU-77bf6b9a-6906-5a93-d28b-b77d2c23d1d2"  # the file's NVML UUID
    assert node.gpus[0].memory_bytes == 16671616 * 1024  # its CUDAGlobalMemorySize (KiB)


def test_an_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(DiscoveryError, match=r"unknown simulated profile 'dgx-b300'.*dgx-a100"):
        profile_topology("dgx-b300")


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_a_simulated_profile_says_so_loudly(profile: str) -> None:
    inv = ProfileGpuDiscovery(profile, reason="because").discover()
    assert inv.simulated
    assert inv.notes == (
        f"SIMULATED inventory (profile {profile}): no real GPU is managed",
        "because",
    )
