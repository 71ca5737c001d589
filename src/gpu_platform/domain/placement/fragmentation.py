"""FGD-style fragmentation of a node against a distribution of typical task shapes.

Theory (Weng et al., "Beware of Fragmentation", USENIX ATC '23, §4): the fragmentation of a
node is the *expected* GPU capacity (milli-GPU) that a task drawn from the workload's typical
shapes could not use there. For each typical shape `m` with popularity `p_m`:

- the node cannot host `m` at all (no GPU of the required model, too few GPUs with enough free
  share, not enough CPU or host memory, or `m` asks for no GPU): every free milli-GPU of the
  node is a fragment for `m`;
- otherwise only the GPUs whose free share is smaller than `m`'s per-GPU share are fragments.

`F(node) = sum_m p_m * fragments_m(node)`. A placement that increases `F` least keeps the
cluster most useful for the tasks that are likely to come next; that is FGD's rule and the
fragmentation term of our score. Everything here works on `NodeShape`, the free-capacity
signature of a node, so results can be cached per signature and shared by identical nodes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "NodeShape",
    "TaskShape",
    "TypicalTasks",
    "cpu_per_milli_gpu",
    "cpu_thresholds",
    "fragmentation",
    "typical_tasks",
]

MILLI = 1000


@dataclass(frozen=True, slots=True)
class TaskShape:
    """What one task asks of one node: CPU milli-cores, host memory MiB, `gpus` GPUs with
    `gpu_milli` (1..1000) milli-GPU each (0 GPUs for a CPU-only task), and the GPU models it
    accepts (empty = any)."""

    cpu_milli: int
    memory_mib: int
    gpus: int
    gpu_milli: int
    models: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.gpus < 0 or self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError(f"negative request: {self}")
        if self.gpus and not 0 < self.gpu_milli <= MILLI:
            raise ValueError(f"gpu_milli must be in 1..{MILLI}, got {self.gpu_milli}")
        if self.gpus > 1 and self.gpu_milli != MILLI:
            raise ValueError("a multi-GPU task takes whole GPUs (gpu_milli == 1000)")

    @property
    def gpu_demand_milli(self) -> int:
        return self.gpus * self.gpu_milli if self.gpus else 0


@dataclass(frozen=True, slots=True)
class NodeShape:
    """A node's free capacity: GPU `model`, free CPU milli-cores, free host memory MiB and the
    free milli-GPU of each GPU, sorted descending (identical nodes have equal shapes)."""

    model: str
    cpu_milli: int
    memory_mib: int
    gpu_free: tuple[int, ...]

    def accepts_model(self, task: TaskShape) -> bool:
        return not task.models or self.model in task.models

    def fits(self, task: TaskShape) -> bool:
        """True when the node can host `task` now (model, CPU, memory and GPU shares)."""
        if task.cpu_milli > self.cpu_milli or task.memory_mib > self.memory_mib:
            return False
        return not task.gpus or self.fits_gpus(task)

    def fits_gpus(self, task: TaskShape) -> bool:
        """True when the GPU side fits: an accepted model and `task.gpus` GPUs with at least
        `task.gpu_milli` free each (CPU and memory not checked)."""
        if task.models and self.model not in task.models:
            return False
        need = task.gpus
        if need > len(self.gpu_free):
            return False
        return need == 0 or self.gpu_free[need - 1] >= task.gpu_milli


@dataclass(frozen=True, slots=True)
class TypicalTasks:
    """The task shapes that make up most of a workload, with their popularity (sums to 1)."""

    shapes: tuple[tuple[TaskShape, float], ...]


def typical_tasks(tasks: Iterable[TaskShape], threshold: float = 0.95) -> TypicalTasks:
    """The most popular shapes covering `threshold` of the tasks (FGD's default 95%, CPU-only
    tasks included), popularity renormalised over the kept shapes. Memory is ignored in the
    shape, as in FGD; ties in popularity are broken by the shape's fields for determinism."""
    counts = Counter(
        TaskShape(t.cpu_milli, 0, t.gpus, t.gpu_milli if t.gpus else 0, t.models) for t in tasks
    )
    if not counts:
        return TypicalTasks(())
    total = sum(counts.values())
    ordered = sorted(
        counts.items(),
        key=lambda kv: (-kv[1], kv[0].gpus, kv[0].gpu_milli, kv[0].cpu_milli, sorted(kv[0].models)),
    )
    kept: list[tuple[TaskShape, int]] = []
    covered = 0
    for shape, n in ordered:
        kept.append((shape, n))
        covered += n
        if covered >= threshold * total:
            break
    norm = sum(n for _, n in kept)
    return TypicalTasks(tuple((s, n / norm) for s, n in kept))


def fragmentation(node: NodeShape, typical: TypicalTasks) -> float:
    """Expected milli-GPU of `node` that a typical task could not use (FGD's F(node))."""
    total = sum(node.gpu_free)
    if not total:
        return 0.0
    frag = 0.0
    for task, p in typical.shapes:
        if task.gpus and task.cpu_milli <= node.cpu_milli and node.fits_gpus(task):
            frag += p * sum(f for f in node.gpu_free if f < task.gpu_milli)
        else:
            frag += p * total
    return frag


def cpu_thresholds(typical: TypicalTasks) -> tuple[int, ...]:
    """The distinct CPU milli-cores of the typical GPU shapes, ascending. `fragmentation`
    depends on a node's free CPU only through how many of these it reaches, so
    `bisect_right(thresholds, cpu)` is a cache key that loses nothing."""
    return tuple(sorted({t.cpu_milli for t, _ in typical.shapes if t.gpus}))


def cpu_per_milli_gpu(typical: TypicalTasks) -> float:
    """CPU milli-cores the typical GPU shapes ask per milli-GPU (popularity-weighted mean;
    0 when they ask for no CPU or there are none)."""
    gpu_shapes = [(t, p) for t, p in typical.shapes if t.gpus]
    demand = sum(p * t.gpu_demand_milli for t, p in gpu_shapes)
    return sum(p * t.cpu_milli for t, p in gpu_shapes) / demand if demand else 0.0
