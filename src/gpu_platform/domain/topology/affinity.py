"""Distance and affinity over GPU sets, for placement.

Pair score (NVIDIA go-gpuallocator's besteffort table): PCIe level points - SYS 10, NODE 20,
PHB 30, PXB 40, PIX 50, same board 60 - plus 100 per fabric link. Higher is closer. A set's
`total` is the sum over its unordered pairs (besteffort's objective); its `bottleneck` is the
weakest pair (what a ring collective feels). `distance` is the complement a minimiser wants.

`best_effort` reproduces besteffort's allocation: among all partitions of the available GPUs
into sets of `size`, take the partition with the highest total score, then its best set
holding every required GPU. Exponential: meant as a baseline and oracle on <= 12 GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations

from gpu_platform.domain.model.topology import LinkLevel
from gpu_platform.domain.topology.matrix import Cell, TopologyMatrix

__all__ = [
    "LINK_POINTS",
    "PCIE_POINTS",
    "SetAffinity",
    "best_effort",
    "distance",
    "pair_score",
    "set_affinity",
]

PCIE_POINTS = {
    LinkLevel.SYS: 10,
    LinkLevel.NODE: 20,
    LinkLevel.PHB: 30,
    LinkLevel.PXB: 40,
    LinkLevel.PIX: 50,
    LinkLevel.SAME_BOARD: 60,
}
LINK_POINTS = 100
_MAX_BEST_EFFORT_GPUS = 12


def pair_score(cell: Cell) -> int:
    """Besteffort's score for one GPU pair (higher is closer)."""
    return PCIE_POINTS[cell.level] + LINK_POINTS * cell.links


def distance(matrix: TopologyMatrix, a: int, b: int) -> int:
    """A non-negative distance between GPUs `a` and `b`: `10_000 // pair_score` (SYS = 1000,
    PIX = 200, NV12 = 8); 0 for a GPU and itself. Smaller is closer."""
    if a == b:
        return 0
    return 10_000 // pair_score(matrix.cell(a, b))


@dataclass(frozen=True, slots=True)
class SetAffinity:
    """How tightly a GPU set is connected: `total` and `bottleneck` pair scores, the NUMA
    nodes it spans, and whether every GPU has a PIX/PXB-local NIC (NCCL's GPUDirect rule)."""

    gpus: tuple[int, ...]
    total: int
    bottleneck: int
    numa_nodes: tuple[int, ...]
    nic_local: bool


def set_affinity(matrix: TopologyMatrix, gpus: Iterable[int]) -> SetAffinity:
    chosen = tuple(sorted(set(gpus)))
    scores = [pair_score(matrix.cell(a, b)) for a, b in combinations(chosen, 2)]
    numa = tuple(sorted({matrix.gpu_numa[matrix.gpus.index(g)] for g in chosen}))
    nic_local = bool(matrix.nics) and all(
        min(c.level for c in matrix.gpu_nic[matrix.gpus.index(g)]) <= LinkLevel.PXB for g in chosen
    )
    return SetAffinity(
        gpus=chosen,
        total=sum(scores),
        bottleneck=min(scores) if scores else 0,
        numa_nodes=numa,
        nic_local=nic_local,
    )


def best_effort(
    matrix: TopologyMatrix,
    available: Sequence[int],
    size: int,
    required: Sequence[int] = (),
) -> tuple[int, ...]:
    """NVIDIA besteffort's choice of `size` GPUs from `available` holding `required`; () when
    impossible. Ties go to the first found, in the order of `available`."""
    if size <= 0 or len(available) < size or len(required) > size:
        return ()
    if not set(required) <= set(available):
        return ()
    if len(available) > _MAX_BEST_EFFORT_GPUS:
        raise ValueError(f"best_effort enumerates partitions: at most {_MAX_BEST_EFFORT_GPUS}")
    score = {(a, b): pair_score(matrix.cell(a, b)) for a in available for b in available if a != b}

    def set_score(s: tuple[int | None, ...]) -> int:
        real = [g for g in s if g is not None]
        return sum(score[(a, b)] for a, b in combinations(real, 2))

    padded: list[int | None] = list(available)
    while len(padded) % size:
        padded.append(None)
    req = set(required)
    best: tuple[int, list[tuple[int | None, ...]]] | None = None

    def ok(s: tuple[int | None, ...]) -> bool:
        return None not in s and req <= set(s)

    def walk(rest: list[int | None], acc: list[tuple[int | None, ...]], total: int) -> None:
        nonlocal best
        if not rest:
            if any(ok(s) for s in acc) and (best is None or total > best[0]):
                best = (total, list(acc))
            return
        first, others = rest[0], rest[1:]
        for combo in combinations(range(len(others)), size - 1):
            members = (first, *(others[i] for i in combo))
            pads = members.count(None)
            if pads not in (0, len(padded) - len(available)):
                continue
            left = [g for i, g in enumerate(others) if i not in combo]
            acc.append(members)
            walk(left, acc, total + set_score(members))
            acc.pop()

    walk(padded, [], 0)
    if best is None:
        return ()
    candidates = [s for s in best[1] if ok(s)]
    winner = max(candidates, key=set_score)  # max() keeps the first of equals
    return tuple(sorted(g for g in winner if g is not None))
