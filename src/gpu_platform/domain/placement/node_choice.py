"""The best GPUs for one task on one node, from the node's hardware class and free shares.

Whole GPUs: among the free schedulable GPUs that match the request, every k-subset is tried
(up to `EXACT_LIMIT` subsets; beyond that a greedy growth from every seed GPU) and the set
with the lexicographically largest `(nic_local if gang, tier, bottleneck, total)` wins,
then the one that packs: GPUs whose NUMA node has the fewest other free GPUs, then lowest
indices. REQUIRED NVLink / NUMA wishes filter sets; PREFERRED ones are what `tier` rewards.
One GPU (whole or a share): `single_gpu_choices` lists the candidates in best-fit order
(least free share that fits, fullest NUMA node, lowest index) and the engine picks among
them by fragmentation, as FGD picks a GPU. Pure; results are cached by the caller per
(hardware class, free shares, request) signature.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from gpu_platform.domain.model.gpu import Gpu
from gpu_platform.domain.model.topology import LinkLevel
from gpu_platform.domain.placement.request import MILLI, Affinity, GpuRequest
from gpu_platform.domain.topology.affinity import pair_score
from gpu_platform.domain.topology.matrix import TopologyMatrix

__all__ = [
    "EXACT_LIMIT",
    "HardwareClass",
    "SetChoice",
    "choose_gpus",
    "count_fitting",
    "single_gpu_choices",
    "tier_of",
]

EXACT_LIMIT = 2000
_TIER = {
    LinkLevel.SAME_BOARD: 6,
    LinkLevel.PIX: 5,
    LinkLevel.PXB: 4,
    LinkLevel.PHB: 3,
    LinkLevel.NODE: 2,
    LinkLevel.SYS: 1,
}


@dataclass(frozen=True, slots=True)
class HardwareClass:
    """What makes two nodes interchangeable for placement: GPUs (by position) and topology.
    `pair[i][j]` is the besteffort pair score, `linked[i][j]` whether a fabric link joins
    them, `level[i][j]` their PCIe level, `nic_local[i]` whether GPU i has a PIX/PXB NIC."""

    gpus: tuple[Gpu, ...]
    numa: tuple[int, ...]
    pair: tuple[tuple[int, ...], ...]
    linked: tuple[tuple[bool, ...], ...]
    level: tuple[tuple[LinkLevel, ...], ...]
    nic_local: tuple[bool, ...]

    @staticmethod
    def of(gpus: tuple[Gpu, ...], matrix: TopologyMatrix | None) -> HardwareClass:
        ordered = tuple(sorted(gpus, key=lambda g: g.index))
        n = len(ordered)
        if matrix is not None and set(matrix.gpus) >= {g.index for g in ordered}:
            cells = [[matrix.cell(a.index, b.index) for b in ordered] for a in ordered]
            numa = tuple(matrix.gpu_numa[matrix.gpus.index(g.index)] for g in ordered)
            nic = tuple(
                bool(matrix.nics)
                and min(c.level for c in matrix.gpu_nic[matrix.gpus.index(g.index)])
                <= LinkLevel.PXB
                for g in ordered
            )
            return HardwareClass(
                gpus=ordered,
                numa=numa,
                pair=tuple(tuple(pair_score(c) for c in row) for row in cells),
                linked=tuple(tuple(c.links > 0 for c in row) for row in cells),
                level=tuple(tuple(c.level for c in row) for row in cells),
                nic_local=nic,
            )
        numa = tuple(g.numa_node for g in ordered)
        level = tuple(
            tuple(
                LinkLevel.SAME_BOARD
                if i == j
                else LinkLevel.NODE
                if numa[i] == numa[j] and numa[i] >= 0
                else LinkLevel.SYS
                for j in range(n)
            )
            for i in range(n)
        )
        return HardwareClass(
            gpus=ordered,
            numa=numa,
            pair=tuple(tuple(10 if lv is LinkLevel.SYS else 20 for lv in row) for row in level),
            linked=tuple(tuple(False for _ in range(n)) for _ in range(n)),
            level=level,
            nic_local=tuple(False for _ in range(n)),
        )

    def key(self) -> tuple[object, ...]:
        """Equal for interchangeable nodes (GPU identities aside)."""
        return (
            tuple((g.index, g.model, g.vendor, g.memory_bytes) for g in self.gpus),
            self.numa,
            self.pair,
            self.linked,
            self.nic_local,
        )


@dataclass(frozen=True, slots=True)
class SetChoice:
    """Positions (into `HardwareClass.gpus`) of the chosen GPUs and their quality."""

    positions: tuple[int, ...]
    tier: int
    bottleneck: int
    total: int
    nic_local: bool


def tier_of(hw: HardwareClass, positions: tuple[int, ...]) -> tuple[int, int, int]:
    """(tier, bottleneck, total) of a GPU set: 7 when every pair is fabric-linked (or a single
    GPU), else the PCIe rung of the weakest pair."""
    if len(positions) < 2:
        return 7, 0, 0
    tier, bottleneck, total = 7, 1 << 30, 0
    for a, b in combinations(positions, 2):
        score = hw.pair[a][b]
        total += score
        bottleneck = min(bottleneck, score)
        if not hw.linked[a][b]:
            tier = min(tier, _TIER[hw.level[a][b]])
    return tier, bottleneck, total


def _matches(gpu: Gpu, request: GpuRequest) -> bool:
    if request.models and gpu.model not in request.models:
        return False
    if request.vendors and str(gpu.vendor) not in request.vendors:
        return False
    return gpu.memory_bytes >= request.gpu_memory_bytes and gpu.schedulable


def _allowed(hw: HardwareClass, positions: tuple[int, ...], request: GpuRequest) -> bool:
    if request.numa is Affinity.REQUIRED and len({hw.numa[p] for p in positions}) > 1:
        return False
    if request.nvlink is Affinity.REQUIRED:
        return all(hw.linked[a][b] for a, b in combinations(positions, 2))
    return True


def choose_gpus(
    hw: HardwareClass, free: tuple[int, ...], request: GpuRequest, gang: bool = False
) -> SetChoice | None:
    """The best GPU set for one task of `request` given per-position free milli `free`, or
    None when no allowed set exists on this node."""
    k = request.gpus
    if k == 0:
        return SetChoice((), 7, 0, 0, False)
    need = request.gpu_milli
    usable = [p for p, g in enumerate(hw.gpus) if free[p] >= need and _matches(g, request)]
    if len(usable) < k:
        return None
    free_per_numa: dict[int, int] = {}
    for p, g in enumerate(hw.gpus):
        if free[p] == MILLI and g.schedulable:
            free_per_numa[hw.numa[p]] = free_per_numa.get(hw.numa[p], 0) + 1
    if k == 1:
        return single_gpu_choices(hw, free, request)[0]

    best: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    for s in _candidates(hw, tuple(usable), k):
        if not _allowed(hw, s, request):
            continue
        tier, bottleneck, total = tier_of(hw, s)
        nic = int(gang and all(hw.nic_local[p] for p in s))
        packing = sum(free_per_numa.get(hw.numa[p], 0) for p in s)
        key = (nic, tier, bottleneck, total, -packing, *(-p for p in s))
        if best is None or key > best[0]:
            best = (key, s)
    if best is None:
        return None
    (nic, tier, bottleneck, total, *_), s = best
    return SetChoice(s, tier, bottleneck, total, all(hw.nic_local[p] for p in s))


def count_fitting(hw: HardwareClass, free: tuple[int, ...], request: GpuRequest) -> int:
    """How many GPUs could take one of the request's per-GPU shares (model, vendor, GPU
    memory, schedulable, free share). Without REQUIRED wishes, `choose_gpus` finds a set
    exactly when this is at least `request.gpus`."""
    need = request.gpu_milli
    return sum(1 for p, g in enumerate(hw.gpus) if free[p] >= need and _matches(g, request))


def single_gpu_choices(
    hw: HardwareClass, free: tuple[int, ...], request: GpuRequest
) -> list[SetChoice]:
    """Every GPU one single-GPU task could take, best-fit order first: least free share
    that fits, then the NUMA node with the fewest free GPUs, then the lowest index. The
    engine picks among them by its ranking (fragmentation), keeping this order for ties."""
    need = request.gpu_milli
    free_per_numa: dict[int, int] = {}
    for p, g in enumerate(hw.gpus):
        if free[p] == MILLI and g.schedulable:
            free_per_numa[hw.numa[p]] = free_per_numa.get(hw.numa[p], 0) + 1
    usable = [p for p, g in enumerate(hw.gpus) if free[p] >= need and _matches(g, request)]
    usable.sort(key=lambda q: (free[q], free_per_numa.get(hw.numa[q], 0), q))
    return [SetChoice((p,), 7, 0, 0, hw.nic_local[p]) for p in usable]


def _candidates(hw: HardwareClass, usable: tuple[int, ...], k: int) -> list[tuple[int, ...]]:
    n = len(usable)
    count = 1
    for i in range(k):
        count = count * (n - i) // (i + 1)
    if count <= EXACT_LIMIT:
        return list(combinations(usable, k))
    out = []
    for seed in usable:  # greedy growth: add the GPU with the best sum of pair scores
        chosen = [seed]
        rest = [p for p in usable if p != seed]
        while len(chosen) < k:
            nxt = max(rest, key=lambda q: (sum(hw.pair[q][c] for c in chosen), -q))
            chosen.append(nxt)
            rest.remove(nxt)
        out.append(tuple(sorted(chosen)))
    return sorted(set(out))
