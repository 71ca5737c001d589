"""What a job asks of placement, and what placement answers.

A `GpuRequest` is `tasks` identical tasks (a gang when > 1), each wanting `gpus` GPUs with
`gpu_milli` milli-GPU each on one node (a fraction of one GPU for MPS sharing when
`gpu_milli` < 1000, which requires `gpus == 1`), plus CPU and host memory. Constraints are
either hard (`Affinity.REQUIRED`: never violated) or soft (`PREFERRED`: scored).

The answer is a `GangPlacement` (one `TaskPlacement` per task, all or none) or
`Unschedulable` (from `first_fit`, reused) with one reason per constraint that failed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gpu_platform.domain.model.gpu import Gpu
from gpu_platform.domain.topology.cross_node import NodeLevel

__all__ = ["Affinity", "GangPlacement", "GpuRequest", "GpuShare", "Score", "TaskPlacement"]

MILLI = 1000


class Affinity(enum.StrEnum):
    NONE = "none"
    PREFERRED = "preferred"
    REQUIRED = "required"


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """One task shape x `tasks`. Units: milli-GPU per GPU, CPU milli-cores, bytes.

    `models` / `vendors`: accepted GPU models / vendor names (empty = any).
    `nvlink`: all GPUs of a task pairwise fabric-linked (NVLink/XGMI/Xe Link).
    `numa`: all GPUs of a task on one NUMA node.
    `same_rack`: a gang's nodes under one rack label (leaf preferred over rack).
    `spread`: a spread group (a service's replicas); `avoid_nodes`: nodes to take only when
    no other node fits (those already holding a member of the group). A preference only:
    it never makes a request unschedulable.
    """

    gpus: int = 1
    gpu_milli: int = MILLI
    gpu_memory_bytes: int = 0
    cpu_milli: int = 0
    memory_bytes: int = 0
    models: frozenset[str] = frozenset()
    vendors: frozenset[str] = frozenset()
    nvlink: Affinity = Affinity.PREFERRED
    numa: Affinity = Affinity.PREFERRED
    tasks: int = 1
    same_rack: Affinity = Affinity.PREFERRED
    spread: str = ""
    avoid_nodes: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.gpus < 0 or self.tasks < 1 or self.cpu_milli < 0 or self.memory_bytes < 0:
            raise ValueError(f"invalid request sizes: {self}")
        if self.gpus and not 0 < self.gpu_milli <= MILLI:
            raise ValueError(f"gpu_milli must be in 1..{MILLI}, got {self.gpu_milli}")
        if self.gpus > 1 and self.gpu_milli != MILLI:
            raise ValueError("a fractional share is of one GPU: gpus must be 1")

    @property
    def fractional(self) -> bool:
        return self.gpus == 1 and self.gpu_milli < MILLI


@dataclass(frozen=True, slots=True)
class GpuShare:
    """`milli` milli-GPU of `gpu` (1000 = the whole GPU)."""

    gpu: Gpu
    milli: int


@dataclass(frozen=True, slots=True)
class Score:
    """Why this set won on its node. `tier` is the ladder rung of the weakest GPU pair (7 =
    fabric link, 6 same board, 5 PIX, 4 PXB, 3 PHB, 2 NODE, 1 SYS; 7 for a single GPU);
    `bottleneck` / `total` are besteffort pair scores (weakest pair / sum over pairs);
    `frag_delta` the node's fragmentation increase (milli-GPU, FGD); `leftover_milli` the
    node's free milli-GPU after the task; `nic_local` every GPU has a PIX/PXB NIC;
    `cpu_leftover_milli` the node's free CPU milli-cores after the task and
    `stranded_cores` the CPU cores its free GPUs then lack (both 0 for a node that reports
    no CPU count)."""

    tier: int
    bottleneck: int
    total: int
    frag_delta: float
    leftover_milli: int
    nic_local: bool
    cpu_leftover_milli: int = 0
    stranded_cores: float = 0.0


@dataclass(frozen=True, slots=True)
class TaskPlacement:
    """One task on one node: its GPU shares, the NUMA nodes and CPU ids to pin it to."""

    node: str
    gpus: tuple[GpuShare, ...]
    numa_nodes: tuple[int, ...]
    cpus: tuple[int, ...]
    score: Score


@dataclass(frozen=True, slots=True)
class GangPlacement:
    """Every task of a request placed (never a part of them); `spread` = widest node level."""

    tasks: tuple[TaskPlacement, ...]
    spread: NodeLevel

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(t.node for t in self.tasks)
