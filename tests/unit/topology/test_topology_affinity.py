"""Pair scores, set affinity and NVIDIA besteffort's golden cases (go-gpuallocator tests)."""

from __future__ import annotations

from itertools import combinations

import pytest

from gpu_platform.domain.model.topology import HostTopology
from gpu_platform.domain.topology import (
    best_effort,
    build_matrix,
    distance,
    pair_score,
    set_affinity,
)
from gpu_platform.testing.topology_builders import pairwise_topology


def dgx1_volta() -> HostTopology:
    nv2 = [(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)]
    nv1 = [(0, 1), (0, 2), (1, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7)]
    levels = {}
    for a, b in combinations(range(8), 2):
        if a // 4 == b // 4:
            levels[(a, b)] = "PIX" if b == a + 1 and a % 2 == 0 else "PHB"
    return pairwise_topology(
        "dgx1v",
        8,
        levels,
        nvlinks={**dict.fromkeys(nv2, 2), **dict.fromkeys(nv1, 1)},
        numa=[0, 0, 0, 0, 1, 1, 1, 1],
    )


def dgx1_pascal() -> HostTopology:
    nv1 = [(0, 1), (0, 2), (0, 3), (0, 4), (1, 2), (1, 3), (1, 5), (2, 3), (2, 6), (3, 7)]
    nv1 += [(4, 5), (4, 6), (4, 7), (5, 6), (5, 7), (6, 7)]
    levels = {}
    for a, b in combinations(range(8), 2):
        if a // 4 == b // 4:
            levels[(a, b)] = "PIX" if (a, b) in [(0, 2), (1, 3), (4, 6), (5, 7)] else "PHB"
    return pairwise_topology("dgx1p", 8, levels, nvlinks=dict.fromkeys(nv1, 1))


def rtx8000() -> HostTopology:
    return pairwise_topology(
        "rtx", 4, {(0, 1): "NODE", (2, 3): "NODE"}, nvlinks={(0, 3): 2, (1, 2): 2}
    )


@pytest.mark.parametrize(
    ("available", "required", "size", "expected"),
    [
        ([0, 2, 4, 5], [], 2, (4, 5)),
        ([0, 4, 5, 6], [], 2, (5, 6)),
        ([0, 3, 1], [], 2, (0, 3)),
        ([0, 1, 4], [], 2, (0, 4)),
        (list(range(8)), [4], 2, (4, 7)),
        (list(range(8)), [4], 4, (4, 5, 6, 7)),
        (list(range(8)), [0, 2, 4, 6], 4, (0, 2, 4, 6)),
    ],
)
def test_best_effort_matches_nvidia_on_dgx1_volta(
    available: list[int], required: list[int], size: int, expected: tuple[int, ...]
) -> None:
    m = build_matrix(dgx1_volta())
    assert best_effort(m, available, size, required) == expected


def allocate_all(topo: HostTopology, size: int) -> list[tuple[int, ...]]:
    m = build_matrix(topo)
    free = list(m.gpus)
    out = []
    while len(free) >= size:
        chosen = best_effort(m, free, size)
        out.append(chosen)
        free = [g for g in free if g not in chosen]
    return out


def test_sequential_allocations_match_nvidia_on_three_machines() -> None:
    assert allocate_all(dgx1_volta(), 2) == [(0, 3), (1, 2), (4, 7), (5, 6)]
    assert allocate_all(dgx1_volta(), 4) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert allocate_all(dgx1_pascal(), 2) == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert allocate_all(rtx8000(), 2) == [(0, 3), (1, 2)]


def test_best_effort_refuses_impossible_requests() -> None:
    m = build_matrix(dgx1_volta())
    assert best_effort(m, [0, 1], 3) == ()
    assert best_effort(m, [0, 1], 0) == ()
    assert best_effort(m, [0, 1], 2, required=[5]) == ()


def test_pair_score_is_pcie_points_plus_one_hundred_per_link() -> None:
    m = build_matrix(dgx1_volta())
    assert pair_score(m.cell(0, 1)) == 50 + 100  # PIX + NV1
    assert pair_score(m.cell(0, 3)) == 30 + 200  # PHB + NV2
    assert pair_score(m.cell(0, 5)) == 10  # SYS, no link


def test_distance_orders_pairs_inversely_to_their_score() -> None:
    m = build_matrix(dgx1_volta())
    pairs = [(a, b) for a, b in combinations(m.gpus, 2)]
    for p, q in combinations(pairs, 2):
        if pair_score(m.cell(*p)) > pair_score(m.cell(*q)):
            assert distance(m, *p) <= distance(m, *q)
    assert distance(m, 3, 3) == 0


def test_set_affinity_reports_total_bottleneck_and_numa_span() -> None:
    m = build_matrix(dgx1_volta())
    aff = set_affinity(m, [0, 1, 2, 3])
    assert aff.numa_nodes == (0,)
    assert aff.bottleneck == min(pair_score(m.cell(a, b)) for a, b in combinations(range(4), 2))
    assert aff.total == sum(pair_score(m.cell(a, b)) for a, b in combinations(range(4), 2))
    assert set_affinity(m, [0, 5]).numa_nodes == (0, 1)
    assert not aff.nic_local  # no NIC on this machine
