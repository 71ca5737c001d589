"""The arrivals simulation's inputs and results: the failure model, how attempts end, one
attempt, one utilization sample, a run's figures; a uniform test cluster and the percentile
the figures use. Plain frozen values (times in seconds); `arrivals.py` produces them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpu_platform.domain.model.gpu import Gpu, Vendor
from gpu_platform.domain.model.node import Node, NumaNode

__all__ = [
    "ArrivalsDetail",
    "ArrivalsResult",
    "Attempt",
    "Failures",
    "Outcome",
    "Sample",
    "percentile",
    "sim_node",
    "uniform_cluster",
]


def uniform_cluster(nodes: int, gpus: int = 8, nodes_per_rack: int = 16) -> list[Node]:
    """`nodes` identical hosts of `gpus` 80 GiB GPUs on two NUMA nodes, racks and leaves of
    `nodes_per_rack` nodes (labels `rack`, `leaf`)."""
    return [sim_node(f"sim{i:04d}", i, gpus, "H100", nodes_per_rack) for i in range(nodes)]


def sim_node(name: str, position: int, gpus: int, model: str, nodes_per_rack: int) -> Node:
    """One simulated host: `gpus` 80 GiB GPUs of `model` split over two NUMA nodes, in the rack
    (and leaf) of its `position` among `nodes_per_rack`-node racks."""
    half = max(1, gpus // 2)
    devices = tuple(
        Gpu(f"GPU-{name}-{g}", g, name, Vendor.NVIDIA, model, 80 << 30, numa_node=g // half)
        for g in range(gpus)
    )
    group = f"g{position // nodes_per_rack}"
    return Node(
        name,
        devices,
        numa_nodes=(NumaNode(0), NumaNode(1)),
        labels=(("leaf", group), ("rack", group)),
    )


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))]


@dataclass(frozen=True, slots=True)
class ArrivalsResult:
    """Outcome of one run. Times in seconds."""

    jobs: int
    finished: int
    alloc_pct: float
    arrivals_alloc_pct: float
    queue_delay_p50_s: float
    queue_delay_p99_s: float
    jct_p50_s: float
    jct_p99_s: float
    cycles: int
    preemptions: int
    end_s: float


@dataclass(frozen=True, slots=True)
class Failures:
    """Failure injection: `rate_per_gpu_hour` failures per healthy GPU-hour, each GPU back
    `repair_s` seconds after it failed; `node_rate_per_hour` failures per healthy node-hour,
    each node (all its GPUs) back `node_repair_s` seconds later. Rates >= 0, at least one
    > 0. Draws from `random.Random(seed)` (nodes: a stream of their own); a job is abandoned
    at its `max_restarts` + 1st failure of either kind."""

    rate_per_gpu_hour: float
    repair_s: float = 3600.0
    seed: int = 0
    max_restarts: int = 10
    node_rate_per_hour: float = 0.0
    node_repair_s: float = 3600.0

    def __post_init__(self) -> None:
        if not self.rate_per_gpu_hour >= 0:
            raise ValueError(f"rate_per_gpu_hour must be >= 0, got {self.rate_per_gpu_hour}")
        if not self.node_rate_per_hour >= 0:
            raise ValueError(f"node_rate_per_hour must be >= 0, got {self.node_rate_per_hour}")
        if not (self.rate_per_gpu_hour > 0 or self.node_rate_per_hour > 0):
            raise ValueError("rate_per_gpu_hour or node_rate_per_hour must be > 0, both are 0")
        if not self.repair_s > 0:
            raise ValueError(f"repair_s must be > 0, got {self.repair_s}")
        if not self.node_repair_s > 0:
            raise ValueError(f"node_repair_s must be > 0, got {self.node_repair_s}")
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts}")


class Outcome:
    """How an attempt ended (plain strings, written as they are to CSV)."""

    FINISHED = "finished"
    PREEMPTED = "preempted"
    FAILED = "failed"  # a GPU under it failed; the job was queued again
    NODE_FAILED = "node_failed"  # a node under it failed; the job was queued again
    ABANDONED = "abandoned"  # a GPU or node under it failed once more than `max_restarts` allows


@dataclass(frozen=True, slots=True)
class Attempt:
    """One run of a job: `gpus` GPUs from `start_s` to `end_s` (seconds), ended by `outcome`
    (an `Outcome` value)."""

    job_id: str
    tenant: str
    gpus: int
    start_s: float
    end_s: float
    outcome: str


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster after the scheduling cycle at `t_s`: GPUs allocated to jobs, GPUs down,
    jobs waiting and running, and `fragmented_gpus`: free GPU capacity (in GPUs) the typical
    task mix could not use where it lies (FGD's measure, summed over nodes); `down_gpus`
    includes the GPUs of the `down_nodes` nodes that are down."""

    t_s: float
    allocated_gpus: int
    down_gpus: int
    pending: int
    running: int
    fragmented_gpus: float = 0.0
    down_nodes: int = 0


@dataclass(frozen=True, slots=True)
class ArrivalsDetail:
    """`result` (as `simulate` returns it) plus every attempt in end order, one `Sample` per
    event time, and the failure figures: GPU failures, GPU-hours of work lost (the failed
    attempts' GPUs x their run time), GPU-hours down (failure to repair or run end, GPU and
    node failures), jobs abandoned after too many restarts, node failures and the jobs a node
    failure stopped and queued again (each time counts)."""

    result: ArrivalsResult
    attempts: tuple[Attempt, ...]
    samples: tuple[Sample, ...]
    gpus: int
    failures: int = 0
    lost_gpu_hours: float = 0.0
    down_gpu_hours: float = 0.0
    abandoned: int = 0
    node_failures: int = 0
    jobs_requeued_by_node_failure: int = 0
