"""`place(request, view)`: topology-aware, fragmentation-aware placement (docs/placement.md).

For one task, every signature (hardware class x free GPU shares x free CPU) present in the
view gets a key, lower is better:

    (-nic_local [gangs only], -tier, -bottleneck,
     frag_delta + best-fit weight x leftover + strand weight x stranded cores,
     -total, leftover GPU, leftover CPU)

i.e. the NVLink/PCIe/NUMA ladder first (`node_choice`), then FGD's fragmentation increase
(`fragmentation`, CPU-aware) blended with best fit over GPU and CPU and a penalty for free
GPUs left without the CPU to use them (`ranking_key`). Keys are pure functions of
(signature, request shape), so each request shape keeps a sorted list of signatures that is
extended from the view's signature log; a decision walks that list from the front, skipping
emptied buckets, and takes the first node whose host memory fits and that the request does
not avoid (`avoid_nodes`, a spread group's nodes: the first avoided fit is taken only when no
other node fits). A gang (`tasks` > 1) is
placed task by task inside one leaf, else one rack, else (unless `same_rack` is REQUIRED)
the whole cluster, with tentative binds that are always undone before returning: all tasks
or none.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpu_platform.domain.placement.first_fit import Placement, PlacementRequest, Unschedulable
from gpu_platform.domain.placement.fragmentation import NodeShape, fragmentation
from gpu_platform.domain.placement.node_choice import (
    SetChoice,
    choose_gpus,
    single_gpu_choices,
)
from gpu_platform.domain.placement.request import (
    Affinity,
    GangPlacement,
    GpuRequest,
    GpuShare,
    Score,
    TaskPlacement,
)
from gpu_platform.domain.placement.unschedulable import why_unschedulable
from gpu_platform.domain.placement.view import GANG_LABELS, ClusterView, NodeSlot, Signature
from gpu_platform.domain.topology.cross_node import NodeLevel, gang_spread

__all__ = [
    "BEST_FIT_WEIGHT",
    "CPU_STRAND_FRACTION",
    "CPU_STRAND_WEIGHT",
    "place",
    "place_task",
    "place_whole",
    "ranking_key",
]

_Key = tuple[float, ...]
BEST_FIT_WEIGHT = 50.0  # milli-GPU of fragmentation per unit of normalised leftover
CPU_STRAND_WEIGHT = 200.0  # milli-GPU of fragmentation per CPU core a node's free GPUs lack
CPU_STRAND_FRACTION = 0.75  # of the typical tasks' mean CPU per GPU that a free GPU needs
_UNBOUNDED = 1 << 62
_LOG_SLACK = 1024  # compact the signature log when it exceeds 2 x nodes + this


@dataclass(slots=True)
class _Order:
    entries: list[tuple[_Key, Signature]] = field(default_factory=list)
    present: set[Signature] = field(default_factory=set)
    cursor: int = 0
    # None: no node of that signature can host the task (GPUs, constraints or CPU)
    choices: dict[Signature, tuple[SetChoice, Score] | None] = field(default_factory=dict)


def _shape_key(request: GpuRequest, gang: bool) -> tuple[object, ...]:
    return (
        request.gpus,
        request.gpu_milli,
        request.gpu_memory_bytes,
        request.models,
        request.vendors,
        request.nvlink,
        request.numa,
        request.cpu_milli,
        gang,
    )


_Candidate = tuple[SetChoice, tuple[int, ...], tuple[int, ...]]  # set, sorted shares before/after


def _candidates(
    view: ClusterView, sig: Signature, request: GpuRequest, gang: bool
) -> list[_Candidate]:
    """The GPU sets worth scoring on a node of signature `sig` (CPU aside), with the node's
    sorted usable shares before and after; cached in the view per (class, shares, GPU
    side of the request). One GPU: one candidate per distinct (free share, NIC locality),
    the first in best-fit order (the others would score the same)."""
    key = (sig[0], sig[1], request.gpus, request.gpu_milli, request.gpu_memory_bytes,
           request.models, request.vendors, request.nvlink, request.numa, gang)  # fmt: skip
    cached: list[_Candidate] | None = view.gpu_cache.get(key)
    if cached is not None:
        return cached
    hw = view.classes[sig[0]]
    free = sig[1]
    if request.gpus == 1:
        sets = single_gpu_choices(hw, free, request)
    else:
        one = choose_gpus(hw, free, request, gang)
        sets = [one] if one is not None else []
    usable = [p for p, g in enumerate(hw.gpus) if g.schedulable]
    before = tuple(sorted((free[p] for p in usable), reverse=True))
    out: list[_Candidate] = []
    seen: set[tuple[int, bool]] = set()
    for choice in sets:
        if request.gpus == 1:
            mark = (free[choice.positions[0]], choice.nic_local)
            if mark in seen:
                continue
            seen.add(mark)
        after = list(free)
        for p in choice.positions:
            after[p] -= request.gpu_milli
        out.append((choice, before, tuple(sorted((after[p] for p in usable), reverse=True))))
    view.gpu_cache[key] = out
    return out


def _score(
    view: ClusterView, sig: Signature, request: GpuRequest, gang: bool
) -> tuple[SetChoice, Score] | None:
    """The best GPU set on a node of signature `sig` and its score (None when the GPUs or
    the free CPU cannot host the task). One GPU: every candidate GPU is scored and the best
    by `ranking_key` wins (best-fit order breaks ties)."""
    if sig[2] < request.cpu_milli:
        return None
    best: tuple[_Key, SetChoice, Score] | None = None
    for choice, before, after in _candidates(view, sig, request, gang):
        score = _score_choice(view, sig, choice, request, before, after)
        key = ranking_key(score, gang, view.max_gpus, view.max_cpu)
        if best is None or key < best[0]:
            best = (key, choice, score)
    return None if best is None else (best[1], best[2])


def _frag(view: ClusterView, model: str, cpu: int, shares: tuple[int, ...]) -> float:
    """F(node) for sorted free shares `shares` with `cpu` free CPU milli-cores (cached per
    CPU class: how many typical shapes' CPU the node reaches)."""
    cpu_class = bisect.bisect_right(view.cpu_thresholds, cpu) if cpu < _UNBOUNDED else -1
    key = (model, cpu_class, shares)
    value = view.frag_cache.get(key)
    if value is None:
        value = view.frag_cache[key] = fragmentation(
            NodeShape(model, cpu, _UNBOUNDED, shares), view.typical
        )
    return value


def _score_choice(
    view: ClusterView,
    sig: Signature,
    choice: SetChoice,
    request: GpuRequest,
    before_key: tuple[int, ...],
    after_key: tuple[int, ...],
) -> Score:
    cpu = sig[2]
    model = view.class_model[sig[0]]
    known = cpu < _UNBOUNDED  # a node that reports no CPU count: no CPU terms
    cpu_after = cpu - request.cpu_milli
    delta = _frag(view, model, cpu_after, after_key) - _frag(view, model, cpu, before_key)
    leftover = sum(after_key)
    need = CPU_STRAND_FRACTION * view.cpu_per_milli_gpu * leftover
    return Score(
        tier=choice.tier,
        bottleneck=choice.bottleneck,
        total=choice.total,
        frag_delta=round(delta, 6),
        leftover_milli=leftover,
        nic_local=choice.nic_local,
        cpu_leftover_milli=cpu_after if known else 0,
        stranded_cores=round(max(0.0, need - cpu_after) / 1000, 6) if known else 0.0,
    )


def ranking_key(score: Score, gang: bool, max_gpus: int, max_cpu_milli: int = 0) -> _Key:
    """The order of candidate (node, GPU set) choices, smallest first: NIC locality for gang
    tasks, the ladder tier, the weakest pair, then one blended value - fragmentation increase
    + `BEST_FIT_WEIGHT` x (leftover GPU share of the node / largest node's GPUs + leftover
    CPU / largest node's CPU) + `CPU_STRAND_WEIGHT` x stranded cores - then the pair-score
    sum, leftover GPU, leftover CPU. `max_cpu_milli` 0 leaves the CPU best-fit part out."""
    best_fit = score.leftover_milli / (max(1, max_gpus) * 1000)
    if max_cpu_milli > 0:
        best_fit += score.cpu_leftover_milli / max_cpu_milli
    value = score.frag_delta + BEST_FIT_WEIGHT * best_fit + CPU_STRAND_WEIGHT * score.stranded_cores
    return (
        -float(score.nic_local and gang),
        -float(score.tier),
        -float(score.bottleneck),
        round(value, 6),
        -float(score.total),
        float(score.leftover_milli),
        float(score.cpu_leftover_milli),
    )


def _order(view: ClusterView, request: GpuRequest, gang: bool) -> _Order:
    if len(view.log) > 2 * len(view.slots) + _LOG_SLACK:
        _compact(view)
    orders = view.orders
    k = _shape_key(request, gang)
    order = orders.get(k)
    if order is None:
        order = orders[k] = _Order()
    log = view.log
    choices = order.choices
    while order.cursor < len(log):
        sig = log[order.cursor]
        order.cursor += 1
        if sig in order.present:
            continue
        if sig in choices:
            scored = choices[sig]
        else:
            scored = choices[sig] = _score(view, sig, request, gang)
        if scored is None:
            continue
        key = ranking_key(scored[1], gang, view.max_gpus, view.max_cpu)
        bisect.insort(order.entries, (key, sig))
        order.present.add(sig)
    return order


def _compact(view: ClusterView) -> None:
    """Restart the signature log from the live buckets and drop every ordering's entries and
    cached scores of signatures no node has now (they would otherwise grow without bound as
    CPU and shares take new values). Amortised O(1) per bind."""
    live = view.buckets
    view.log = list(live)
    view.gpu_cache.clear()
    for order in view.orders.values():
        order.entries = [e for e in order.entries if e[1] in live]
        order.present = {e[1] for e in order.entries}
        order.choices = {s: c for s, c in order.choices.items() if s in live}
        order.cursor = 0


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
    avoid = request.avoid_nodes
    stale: list[int] = []
    found: tuple[NodeSlot, Signature] | None = None
    fallback: tuple[NodeSlot, Signature] | None = None  # the best avoided node that fits
    for i, (_, sig) in enumerate(order.entries):
        bucket = buckets.get(sig)
        if not bucket:
            stale.append(i)
            continue
        for name in bucket:
            slot = view.slots[name]
            if slot.memory_free >= request.memory_bytes:  # CPU: part of the signature
                if name not in avoid:
                    found = (slot, sig)
                    break
                if fallback is None:
                    fallback = (slot, sig)
        if found is not None:
            break
    for i in reversed(stale):
        order.present.discard(order.entries[i][1])
        del order.entries[i]
    found = found or fallback
    if found is None:
        return None
    scored = order.choices[found[1]]
    assert scored is not None
    choice, score = scored
    return _task(found[0], view, choice, score, request.gpu_milli if request.gpus else 0)


def _best_within(
    request: GpuRequest, view: ClusterView, order: _Order, within: Sequence[str], gang: bool
) -> TaskPlacement | None:
    best: tuple[_Key, str, Signature] | None = None
    for name in within:
        slot = view.slots.get(name)
        if slot is None or not _fits_host(slot, request):
            continue
        sig = (slot.hw, tuple(slot.free), slot.cpu_free)
        if sig in order.choices:
            scored = order.choices[sig]
        else:
            scored = order.choices[sig] = _score(view, sig, request, gang)
        if scored is None:
            continue
        key = ranking_key(scored[1], gang, view.max_gpus, view.max_cpu)
        if best is None or (key, name) < best[:2]:
            best = (key, name, sig)
    if best is None:
        return None
    slot = view.slots[best[1]]
    scored = order.choices[best[2]]
    assert scored is not None
    choice, score = scored
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
            return why_unschedulable(request, view)
        return GangPlacement((task,), NodeLevel.SAME_NODE)
    for within in _domains(request, view):
        tasks = _try_gang(request, view, within)
        if tasks is not None:
            spread = gang_spread([(t.node, view.slots[t.node].node.labels) for t in tasks])
            return GangPlacement(tuple(tasks), spread)
    return why_unschedulable(request, view)


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
