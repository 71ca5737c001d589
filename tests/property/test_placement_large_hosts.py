"""Hosts with more than 11 GPUs: past `EXACT_LIMIT` subsets `choose_gpus` grows sets greedily
from every seed GPU. The greedy set is checked against the exhaustive search (the bound is
stated in docs/placement.md: same tier and weakest link, pair-score sum within 1 %)."""

from __future__ import annotations

import random
from itertools import combinations
from math import comb

from gpu_platform.adapters.outbound.hwloc.probe import HwlocTopologyProbe
from gpu_platform.domain.model.gpu import Gpu, Vendor
from gpu_platform.domain.model.node import Node, NumaNode
from gpu_platform.domain.placement.engine import place
from gpu_platform.domain.placement.first_fit import Unschedulable
from gpu_platform.domain.placement.node_choice import (
    EXACT_LIMIT,
    HardwareClass,
    choose_gpus,
    tier_of,
)
from gpu_platform.domain.placement.request import Affinity, GangPlacement, GpuRequest
from gpu_platform.domain.placement.view import ClusterView
from gpu_platform.domain.topology.inventory import node_from_topology
from gpu_platform.domain.topology.matrix import build_matrix
from gpu_platform.testing.system import require_shared

TOTAL_WITHIN = 0.99  # greedy's pair-score sum is at least this share of the exhaustive one


def sixteen_gpu_node() -> Node:
    name = "big"
    gpus = tuple(
        Gpu(f"{name}-g{g}", g, name, Vendor.NVIDIA, "A", 16 << 30, numa_node=g // 8)
        for g in range(16)
    )
    numa = (NumaNode(0, tuple(range(32))), NumaNode(1, tuple(range(32, 64))))
    return Node(name, gpus, numa, 64)


def check_against_exhaustive(hw: HardwareClass, rng: random.Random, trials: int) -> int:
    n = len(hw.gpus)
    checked = 0
    for _ in range(trials):
        free_positions = sorted(rng.sample(range(n), rng.randint(12, n)))
        free = tuple(1000 if p in free_positions else 0 for p in range(n))
        k = rng.randint(3, min(10, len(free_positions)))
        if comb(len(free_positions), k) <= EXACT_LIMIT:
            continue  # the exact search ran: nothing to compare
        choice = choose_gpus(hw, free, GpuRequest(k))
        assert choice is not None
        assert set(choice.positions) <= set(free_positions)
        best = max(tier_of(hw, s) for s in combinations(free_positions, k))
        assert (choice.tier, choice.bottleneck) == best[:2]
        assert choice.total >= TOTAL_WITHIN * best[2]
        checked += 1
    return checked


def test_a_sixteen_gpu_host_is_placed_greedily_and_kept_consistent() -> None:
    view = ClusterView([sixteen_gpu_node()])
    for size in (8, 6, 2):  # C(16, 8) = 12,870 subsets > EXACT_LIMIT: greedy
        request = GpuRequest(size, numa=Affinity.REQUIRED)
        result = place(request, view)
        assert isinstance(result, GangPlacement)
        task = result.tasks[0]
        assert len({g.gpu.index for g in task.gpus}) == size
        assert len({g.gpu.numa_node for g in task.gpus}) == 1
        view.bind(task)
        view.check_invariants()
    assert isinstance(place(GpuRequest(1), view), Unschedulable)


def test_greedy_sets_on_a_sixteen_gpu_two_socket_host_match_the_exhaustive_search() -> None:
    hw = HardwareClass.of(sixteen_gpu_node().gpus, None)
    assert check_against_exhaustive(hw, random.Random(7), 40) > 10


def test_greedy_sets_on_dgx2_match_the_exhaustive_search_within_the_bound() -> None:
    xml = require_shared("topologies", "hwloc", "nvidiaDGX2.xml")
    topo = HwlocTopologyProbe(str(xml), node="n0").probe()
    node = node_from_topology(topo)
    hw = HardwareClass.of(node.gpus, build_matrix(topo))
    assert len(hw.gpus) == 16
    assert check_against_exhaustive(hw, random.Random(11), 40) > 10
