"""The FGD evaluation protocol (Weng et al., USENIX ATC '23), as a pure function.

1. Shuffle the workload's tasks with the seed, then append copies drawn with replacement until
   the next copy would push the total GPU request past `tune` (1.3) x the cluster capacity.
2. Place the tasks one by one, never departing; a task that fits nowhere is dropped. Our
   `default` places each task with the production engine's `place()` (`through_engine`).
3. Record the GPU allocation ratio (allocated milli-GPU / capacity, in %) against the arrived
   GPU demand (requested milli-GPU of all tasks so far, placed or not, in % of capacity).

For the baselines, nodes are bucketed by free-capacity signature (`NodeShape`): identical
nodes share one bucket, a policy scores each signature once per task shape (cached), and a
placement moves one node from its bucket to another. The randomness is a caller-provided
`random.Random`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpu_platform.domain.placement.fragmentation import (
    MILLI,
    NodeShape,
    TaskShape,
    typical_tasks,
)
from gpu_platform.domain.simulation.policies import (
    ENGINE_POLICY,
    Choice,
    ScoreContext,
    apply,
    gpu_options,
    make_policy,
)
from gpu_platform.domain.simulation.through_engine import EnginePlacer, as_node

__all__ = ["SimNode", "SimResult", "inflate", "simulate"]


@dataclass(frozen=True, slots=True)
class SimNode:
    """One node of the simulated cluster: CPU milli-cores, memory MiB, GPU count and model."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str

    def shape(self) -> NodeShape:
        return NodeShape(self.model, self.cpu_milli, self.memory_mib, (MILLI,) * self.gpus)


@dataclass(frozen=True, slots=True)
class SimResult:
    """One run: `curve[k]` = allocation % once arrived demand reached k % (k = 0..130), the
    final allocation %, unallocated GPUs at the end, and tasks placed / dropped."""

    policy: str
    seed: int
    curve: tuple[float, ...]
    alloc_pct_at_100: float
    alloc_pct_at_130: float
    unallocated_gpus_at_130: float
    placed: int
    failed: int


def inflate(
    tasks: Sequence[TaskShape], capacity_milli: int, rng: random.Random, tune: float = 1.3
) -> list[TaskShape]:
    """Step 1: the shuffled tasks, padded with random copies up to `tune` x capacity."""
    order = list(tasks)
    rng.shuffle(order)
    limit = tune * capacity_milli
    total = sum(t.gpu_demand_milli for t in order)
    if not any(t.gpu_demand_milli for t in tasks):
        return order  # copies of GPU-less tasks would never reach the target
    while True:
        extra = tasks[rng.randrange(len(tasks))]
        if total + extra.gpu_demand_milli > limit:
            break
        order.append(extra)
        total += extra.gpu_demand_milli
    return order


def _pick(
    members: list[int],
    shape: NodeShape,
    task: TaskShape,
    rng: random.Random,
    at_random: bool,
    cache: dict[tuple[NodeShape, TaskShape], Choice],
) -> tuple[int, int]:
    """Take a node out of its bucket and say which GPU (by free value) the task gets."""
    if at_random:
        j = rng.randrange(len(members))
        members[j], members[-1] = members[-1], members[j]
        options = [f for f in shape.gpu_free if f >= task.gpu_milli] if task.gpus == 1 else []
        gpu = rng.choice(options) if options else -1
    else:
        gpu = cache[(shape, task)][1] if task.gpus == 1 else -1
        if task.gpus == 1 and gpu not in gpu_options(shape, task):
            raise AssertionError("policy chose a GPU that does not fit")
    return members.pop(), gpu


def _bucket_placer(
    nodes: Sequence[SimNode], policy: str, ctx: ScoreContext, rng: random.Random
) -> Callable[[TaskShape], bool]:
    """A baseline policy over signature buckets: the lowest score over every signature."""
    score, random_ties = make_policy(policy, ctx)
    is_random = policy == "random"
    buckets: dict[NodeShape, list[int]] = {}
    for i, node in enumerate(nodes):
        buckets.setdefault(node.shape(), []).append(i)
    cache: dict[tuple[NodeShape, TaskShape], Choice] = {}

    def place(task: TaskShape) -> bool:
        best: Choice | None = None
        ties: list[NodeShape] = []
        for shape in buckets:
            if not shape.fits(task):
                continue
            key = (shape, task)
            choice = cache.get(key)
            if choice is None:
                choice = cache[key] = score(shape, task)
            if best is None or choice[0] < best[0]:
                best, ties = choice, [shape]
            elif choice[0] == best[0]:
                ties.append(shape)
        if best is None:
            return False
        shape = rng.choices(ties, [len(buckets[s]) for s in ties])[0] if random_ties else ties[0]
        picked, gpu = _pick(buckets[shape], shape, task, rng, is_random, cache)
        if not buckets[shape]:
            del buckets[shape]
        buckets.setdefault(apply(shape, task, gpu), []).append(picked)
        return True

    return place


def simulate(
    nodes: Sequence[SimNode],
    tasks: Sequence[TaskShape],
    policy: str,
    seed: int,
    tune: float = 1.3,
) -> SimResult:
    """Run the protocol for one policy and one seed (pure and deterministic). `default`
    places through the production engine (`through_engine`); the others are scored here."""
    rng = random.Random(seed)
    capacity = sum(n.gpus for n in nodes) * MILLI
    workload = inflate(tasks, capacity, rng, tune)
    typical = typical_tasks(tasks)
    placer: Callable[[TaskShape], bool]
    if policy == ENGINE_POLICY:
        placer = EnginePlacer(
            [as_node(n.name, n.cpu_milli, n.memory_mib, n.gpus, n.model) for n in nodes], typical
        )
    else:
        ctx = ScoreContext(
            max_cpu_milli=max((n.cpu_milli for n in nodes), default=1),
            max_gpus=max((n.gpus for n in nodes), default=1),
            typical=typical,
        )
        placer = _bucket_placer(nodes, policy, ctx, rng)
    top = round(tune * 100)
    curve = [0.0] * (top + 1)
    arrived = allocated = placed = failed = 0
    mark = 0
    for task in workload:
        arrived += task.gpu_demand_milli
        if placer(task):
            allocated += task.gpu_demand_milli
            placed += 1
        else:
            failed += 1
        while mark <= top and arrived * 100 >= mark * capacity:
            curve[mark] = 100.0 * allocated / capacity
            mark += 1
    final = 100.0 * allocated / capacity
    for k in range(mark, top + 1):
        curve[k] = final
    at100 = curve[min(100, top)]
    return SimResult(
        policy=policy,
        seed=seed,
        curve=tuple(round(c, 4) for c in curve),
        alloc_pct_at_100=at100,
        alloc_pct_at_130=final,
        unallocated_gpus_at_130=(capacity - allocated) / MILLI,
        placed=placed,
        failed=failed,
    )
