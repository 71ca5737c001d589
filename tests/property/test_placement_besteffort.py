"""Against NVIDIA's besteffort policy: on every simulated profile and every hwloc topology of
../shared, for every request size on an idle host, our set's link quality (weakest pair, then
sum of pair scores) is at least besteffort's."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.adapters.outbound.hwloc.probe import HwlocTopologyProbe
from gpu_platform.adapters.outbound.sim.profiles import PROFILES, profile_topology
from gpu_platform.domain.model.topology import HostTopology
from gpu_platform.domain.placement.engine import place
from gpu_platform.domain.placement.request import GangPlacement, GpuRequest
from gpu_platform.domain.placement.view import ClusterView
from gpu_platform.domain.topology import best_effort, build_matrix, set_affinity
from gpu_platform.domain.topology.inventory import node_from_topology
from gpu_platform.testing.system import require_shared


def compare(topo: HostTopology) -> int:
    matrix = build_matrix(topo)
    node = node_from_topology(topo)
    available = [g.index for g in node.gpus]
    checked = 0
    for size in range(1, len(available) + 1):
        view = ClusterView([node])
        result = place(GpuRequest(size), view)
        assert isinstance(result, GangPlacement)
        ours = set_affinity(matrix, [g.gpu.index for g in result.tasks[0].gpus])
        theirs = set_affinity(matrix, best_effort(matrix, available, size))
        assert (ours.bottleneck, ours.total) >= (theirs.bottleneck, theirs.total), (size, ours)
        checked += 1
    return checked


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_sim_profiles_get_links_at_least_as_good_as_besteffort(profile: str) -> None:
    assert compare(profile_topology(profile)) >= 5


def test_hwloc_topologies_get_links_at_least_as_good_as_besteffort() -> None:
    folder = require_shared("topologies", "hwloc")
    compared = 0
    for xml in sorted(Path(folder).glob("*.xml")):
        topo = HwlocTopologyProbe(str(xml), node="n0").probe()
        if not 2 <= len(topo.gpus) <= 10:  # besteffort enumerates partitions
            continue
        compared += compare(topo)
    assert compared > 0


@pytest.mark.parametrize("half", [0, 1])
def test_dgx2_halves_get_links_at_least_as_good_as_besteffort(half: int) -> None:
    """DGX-2 has 16 GPUs, too many for besteffort's exhaustive partitions: compare on each
    baseboard's 8 GPUs (the others marked used)."""
    xml = require_shared("topologies", "hwloc", "nvidiaDGX2.xml")
    topo = HwlocTopologyProbe(str(xml), node="n0").probe()
    matrix = build_matrix(topo)
    node = node_from_topology(topo)
    indices = sorted(g.index for g in node.gpus)
    available = indices[8 * half : 8 * half + 8]
    for size in range(1, 9):
        view = ClusterView.from_free([node], {node.name: available})
        result = place(GpuRequest(size), view)
        assert isinstance(result, GangPlacement)
        chosen = [g.gpu.index for g in result.tasks[0].gpus]
        assert set(chosen) <= set(available)
        ours = set_affinity(matrix, chosen)
        theirs = set_affinity(matrix, best_effort(matrix, available, size))
        assert (ours.bottleneck, ours.total) >= (theirs.bottleneck, theirs.total), size
