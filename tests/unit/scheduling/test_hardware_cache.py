"""HardwareCache.rdma_matrix: one NIC matrix per hardware type, whatever the node is called."""

from __future__ import annotations

from gpu_platform.adapters.outbound.sim.profiles import profile_topology
from gpu_platform.domain.scheduling.live_view import HardwareCache
from gpu_platform.domain.topology.matrix import build_matrix


def test_identical_hosts_share_one_rdma_matrix_equal_to_a_fresh_build() -> None:
    cache = HardwareCache()
    a, b = profile_topology("dgx-a100", "node-a"), profile_topology("dgx-a100", "node-b")
    assert a != b  # different names: only the hardware is the same
    first = cache.rdma_matrix(a)
    assert cache.rdma_matrix(b) is first
    rdma = [n.name for n in a.nics if n.kind == "rdma"]
    fresh = build_matrix(b, rdma)
    assert first.nics == fresh.nics == tuple(rdma)
    assert [first.nearest_nics(g) for g in first.gpus] == [
        fresh.nearest_nics(g) for g in fresh.gpus
    ]


def test_other_hardware_gets_its_own_matrix() -> None:
    cache = HardwareCache()
    a100 = cache.rdma_matrix(profile_topology("dgx-a100"))
    h100 = cache.rdma_matrix(profile_topology("dgx-h100"))
    assert h100 is not a100
    topo = profile_topology("dgx-h100")
    assert h100.nics == tuple(n.name for n in topo.nics if n.kind == "rdma")
