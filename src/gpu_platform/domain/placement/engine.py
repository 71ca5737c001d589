"""`place(request, view)`: topology-aware, fragmentation-aware placement (docs/placement.md).

For one task, every signature (hardware class x free shares) present in the view gets a key,
lower is better:

    (-nic_local [gangs only], -tier, -bottleneck, frag_delta + w * leftover, -total, leftover)

i.e. the NVLink/PCIe/NUMA ladder first (`node_choice`), then FGD's fragmentation increase
(`fragmentation`) blended with best fit (`ranking_key`), as the simulator's `default`.
Keys are pure functions of (signature, request shape), so each request shape keeps a
sorted list of signatures that is extended from the view's
signature log; a decision walks that list from the front, skipping emptied buckets, and takes
the first node whose CPU and memory fit. A gang (`tasks` > 1) is placed task by task inside
one leaf, else one rack, else (unless `same_rack` is REQUIRED) the whole cluster, with
tentative binds that are always undone before returning: all tasks or none.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpu_platform.domain.placement.first_fit import Placement, PlacementRequest, Unschedulable
from gpu_platform.domain.placement.fragmentation import NodeShape, fragmentation
from gpu_platform.domain.placement.node_choice import SetChoice, choose_gpus, single_gpu_choices
from gpu_platform.domain.placement.request import (
    Affinity,
    GangPlacement,
    GpuRequest,
    GpuShare,
    Score,
    TaskPlacement,
)
from gpu_platform.domain.placement.view import GANG_LABELS, ClusterView, NodeSlot, Signature
from gpu_platform.domain.topology.cross_node import NodeLevel, gang_spread

__all__ = ["BEST_FIT_WEIGHT", "place", "place_task", "place_whole", "ranking_key"]

_Key = tuple[float, ...]
BEST_FIT_WEIGHT = 50.0  # milli-GPU of fragmentation per unit of normalised leftover
_UNBOUNDED = 1 << 62


@dataclass(slots=True)
class _Order:
    entries: list[tuple[_Key, Signature]] = field(default_factory=list)
    present: set[Signature] = field(default_factory=set)
    cursor: int = 0
    choices: dict[Signature, tuple[SetChoice, Score]] = field(default_factory=dict)


def _shape_key(request: GpuRequest, gang: bool) -> tuple[object, ...]:
    return (
        request.gpus,
        request.gpu_milli,
        request.gpu_memory_bytes,
        request.models,
        request.vendors,
        request.nvlink,
        request.numa,
        gang,
    )


def _score(
    view: ClusterView, sig: Signature, request: GpuRequest, gang: bool
) -> tuple[SetChoice, Score] | None:
    """The best GPU set on a node of signature `sig` and its score. One GPU: every candidate
    GPU is scored and the best by `ranking_key` wins (best-fit order breaks ties)."""
    hw = view.classes[sig[0]]
    if request.gpus == 1:
        candidates = single_gpu_choices(hw, sig[1], request)
    else:
        one = choose_gpus(hw, sig[1], request, gang)
        candidates = [one] if one is not None else []
    best: tuple[_Key, SetChoice, Score] | None = None
    for choice in candidates:
        score = _score_choice(view, sig, choice, request)
        key = ranking_key(score, gang, view.max_gpus)
        if best is None or key < best[0]:
            best = (key, choice, score)
    return None if best is None else (best[1], best[2])


def _score_choice(
    view: ClusterView, sig: Signature, choice: SetChoice, request: GpuRequest
) -> Score:
    hw = view.classes[sig[0]]
    free = sig[1]
    after = list(free)
    for p in choice.positions:
        after[p] -= request.gpu_milli
    usable = [p for p, g in enumerate(hw.gpus) if g.schedulable]
    frag_cache = view.frag_cache
    before_key = tuple(sorted((free[p] for p in usable), reverse=True))
    after_key = tuple(sorted((after[p] for p in usable), reverse=True))
    values = []
    for k in (before_key, after_key):
        v = frag_cache.get(k)
        if v is None:
            v = frag_cache[k] = fragmentation(
                NodeShape("", _UNBOUNDED, _UNBOUNDED, k), view.typical
            )
        values.append(v)
    return Score(
        tier=choice.tier,
        bottleneck=choice.bottleneck,
        total=choice.total,
        frag_delta=round(values[1] - values[0], 6),
        leftover_milli=sum(after_key),
        nic_local=choice.nic_local,
    )


def ranking_key(score: Score, gang: bool, max_gpus: int) -> _Key:
    """The order of candidate (node, GPU set) choices, smallest first: NIC locality for gang
    tasks, the ladder tier, the weakest pair, then fragmentation increase plus
    `BEST_FIT_WEIGHT` x leftover GPU share of the node (normalised by the largest node's
    GPU count, as the simulator's `default` policy does), then the pair-score sum."""
    best_fit = BEST_FIT_WEIGHT * score.leftover_milli / (max(1, max_gpus) * 1000)
    return (
        -float(score.nic_local and gang),
        -float(score.tier),
        -float(score.bottleneck),
        round(score.frag_delta + best_fit, 6),
        -float(score.total),
        float(score.leftover_milli),
    )


def _order(view: ClusterView, request: GpuRequest, gang: bool) -> _Order:
    orders = view.orders
    k = _shape_key(request, gang)
    order = orders.get(k)
    if order is None:
        order = orders[k] = _Order()
    log = view.log
    while order.cursor < len(log):
        sig = log[order.cursor]
        order.cursor += 1
        if sig in order.present:
            continue
        scored = order.choices.get(sig)
        if scored is None:
            scored = _score(view, sig, request, gang)
            if scored is None:
                continue
            order.choices[sig] = scored
        bisect.insort(order.entries, (ranking_key(scored[1], gang, view.max_gpus), sig))
        order.present.add(sig)
    return order


def _fits_host(slot: NodeSlot, request: GpuRequest) -> bool:
    return slot.cpu_free >= request.cpu_milli and slot.memory_free >= request.memory_bytes


def _task(
    slot: NodeSlot, view: ClusterView, choice: SetChoice, score: Score, milli: int
) -> TaskPlacement:
    hw = view.classes[slot.hw]
    gpus = tuple(GpuShare(hw.gpus[p], milli) for p in choice.positions)
    numa = tuple(sorted({hw.numa[p] for p in choice.positions if hw.numa[p] >= 0}))
    key = (slot.node.name, numa)
    cpus = view.cpu_cache.get(key)
    if cpus is None:
        cpus = tuple(sorted(c for n in slot.node.numa_nodes if n.id in numa for c in n.cpus))
        view.cpu_cache[key] = cpus
    return TaskPlacement(slot.node.name, gpus, numa, cpus, score)


def place_task(
    request: GpuRequest,
    view: ClusterView,
    within: Sequence[str] | None = None,
    gang: bool = False,
) -> TaskPlacement | None:
    """The best node and GPUs for ONE task of `request` (None when none fits). Does not
    bind. `within` restricts the nodes (a gang's leaf or rack): those nodes are ranked
    directly, which is cheaper than walking the cluster-wide ordering for a small group."""
    order = _order(view, request, gang)
    if within is not None:
        return _best_within(request, view, order, within, gang)
    buckets = view.buckets
    stale: list[int] = []
    found: TaskPlacement | None = None
    for i, (_, sig) in enumerate(order.entries):
        bucket = buckets.get(sig)
        if not bucket:
            stale.append(i)
            continue
        for name in bucket:
            slot = view.slots[name]
            if _fits_host(slot, request):
                choice, score = order.choices[sig]
                found = _task(slot, view, choice, score, request.gpu_milli if request.gpus else 0)
                break
        if found is not None:
            break
    for i in reversed(stale):
        order.present.discard(order.entries[i][1])
        del order.entries[i]
    return found


def _best_within(
    request: GpuRequest, view: ClusterView, order: _Order, within: Sequence[str], gang: bool
) -> TaskPlacement | None:
    best: tuple[_Key, str, Signature] | None = None
    for name in within:
        slot = view.slots.get(name)
        if slot is None or not _fits_host(slot, request):
            continue
        sig = (slot.hw, tuple(slot.free))
        scored = order.choices.get(sig)
        if scored is None:
            scored = _score(view, sig, request, gang)
            if scored is None:
                continue
            order.choices[sig] = scored
        key = ranking_key(scored[1], gang, view.max_gpus)
        if best is None or (key, name) < best[:2]:
            best = (key, name, sig)
    if best is None:
        return None
    slot = view.slots[best[1]]
    choice, score = order.choices[best[2]]
    return _task(slot, view, choice, score, request.gpu_milli if request.gpus else 0)


def place_whole(request: PlacementRequest, view: ClusterView) -> Placement | Unschedulable:
    """Drop-in for `first_fit`: whole GPUs on one node, answered in first_fit's types. The
    caller binds the result (`view.bind(task)` via `place`, or rebuilds the view)."""
    result = place(GpuRequest(gpus=request.gpus), view)
    if isinstance(result, Unschedulable):
        return result
    task = result.tasks[0]
    return Placement(task.node, tuple(share.gpu for share in task.gpus))


def place(request: GpuRequest, view: ClusterView) -> GangPlacement | Unschedulable:
    """Place every task of `request` or none; never mutates what the view reports."""
    if request.tasks == 1:
        task = place_task(request, view)
        if task is None:
            return _why(request, view)
        return GangPlacement((task,), NodeLevel.SAME_NODE)
    for within in _domains(request, view):
        tasks = _try_gang(request, view, within)
        if tasks is not None:
            spread = gang_spread([(t.node, view.slots[t.node].node.labels) for t in tasks])
            return GangPlacement(tuple(tasks), spread)
    return _why(request, view)


def _try_gang(
    request: GpuRequest, view: ClusterView, within: Sequence[str] | None
) -> list[TaskPlacement] | None:
    placed: list[TaskPlacement] = []
    try:
        for _ in range(request.tasks):
            task = place_task(request, view, within, gang=True)
            if task is None:
                return None
            view.bind(task, request.cpu_milli, request.memory_bytes)
            placed.append(task)
        return list(placed)
    finally:
        for task in reversed(placed):
            view.release(task, request.cpu_milli, request.memory_bytes)


def _domains(request: GpuRequest, view: ClusterView) -> list[Sequence[str] | None]:
    """Candidate node groups for a gang, tightest first: each leaf, each rack, the cluster."""
    out: list[Sequence[str] | None] = []
    need = request.tasks * request.gpus * request.gpu_milli
    for label in GANG_LABELS:
        fitting = sorted(
            (amount, value)
            for (lb, value), amount in view.label_free.items()
            if lb == label and amount >= need
        )
        out.extend(view.label_members[(label, value)] for _, value in fitting)
    if request.same_rack is not Affinity.REQUIRED:
        out.append(None)
    return out


def _why(request: GpuRequest, view: ClusterView) -> Unschedulable:
    """One reason per failed constraint, with how many nodes it ruled out."""
    counts: dict[str, int] = {}

    def miss(what: str) -> None:
        counts[what] = counts.get(what, 0) + 1

    probe = GpuRequest(
        gpus=request.gpus,
        gpu_milli=request.gpu_milli,
        models=request.models,
        vendors=request.vendors,
    )
    for slot in view.slots.values():
        hw = view.classes[slot.hw]
        gpus = hw.gpus
        free = tuple(slot.free)
        if request.gpus:
            if request.models and not any(g.model in request.models for g in gpus):
                miss("gpu model")
                continue
            if request.vendors and not any(str(g.vendor) in request.vendors for g in gpus):
                miss("gpu vendor")
                continue
            if not any(g.memory_bytes >= request.gpu_memory_bytes for g in gpus):
                miss("gpu memory")
                continue
            if choose_gpus(hw, free, probe) is None:
                miss("free gpus")
                continue
            if (
                request.numa is Affinity.REQUIRED
                and choose_gpus(
                    hw, free, GpuRequest(request.gpus, request.gpu_milli, numa=Affinity.REQUIRED)
                )
                is None
            ):
                miss("numa required")
                continue
            if (
                request.nvlink is Affinity.REQUIRED
                and choose_gpus(
                    hw, free, GpuRequest(request.gpus, request.gpu_milli, nvlink=Affinity.REQUIRED)
                )
                is None
            ):
                miss("nvlink required")
                continue
        if slot.cpu_free < request.cpu_milli:
            miss("cpu")
            continue
        if slot.memory_free < request.memory_bytes:
            miss("memory")
            continue
    if request.tasks > 1 and not counts:
        counts["gang"] = len(view.slots)
    shape = (
        f"{request.tasks} x {request.gpus} GPU"
        if not request.fractional
        else f"{request.tasks} x {request.gpu_milli} milli-GPU"
    )
    detail = "; ".join(f"{what}: {n} nodes" for what, n in sorted(counts.items()))
    if request.tasks > 1 and "gang" in counts:
        detail = f"each node fits a task but the {request.tasks} tasks do not fit together" + (
            " within one rack" if request.same_rack is Affinity.REQUIRED else ""
        )
    if not view.slots:
        detail = "no nodes"
    return Unschedulable(f"no placement for {shape}: {detail}", tuple(sorted(counts.items())))
