"""What the scheduler reads and what it answers: plain frozen values, no behaviour.

Inputs: `PendingJob`s (waiting), `RunningJob`s (holding GPUs), a `Quota` per tenant and a
`SchedulerPolicy`. Output: a `Decision` - jobs to bind (whole gangs), running jobs to preempt
(whole gangs, with the job they make room for and why) and, for every pending job that is not
bound, a `PendingReason` (a code and a one-line message for `jobs describe`).

Units: GPUs in milli-GPU inside the scheduler (1000 = one GPU) and whole GPUs in quotas and
messages; CPU in milli-cores; memory in bytes; times in seconds on the caller's clock.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpu_platform.domain.placement.request import MILLI, GangPlacement, GpuRequest, TaskPlacement

__all__ = [
    "Decision",
    "PendingCode",
    "PendingJob",
    "PendingReason",
    "Preemption",
    "PreemptionCause",
    "QueueOrder",
    "Quota",
    "Reservation",
    "RunningJob",
    "SchedulerPolicy",
]


class QueueOrder(enum.StrEnum):
    FIFO = "fifo"  # submission order
    PRIORITY = "priority"  # effective priority (priority + aging), then submission order


class PendingCode(enum.StrEnum):
    """Why a job waits. `PREEMPTION`: victims were chosen (or are stopping) to make room.
    `BACKOFF`: re-queued after a fault, it may not start before its retry time.
    `ARRAY_THROTTLE`: a task of a job array whose throttle (`%N`) is reached."""

    QUOTA = "quota"
    CAPACITY = "capacity"
    TOPOLOGY = "topology"
    RESERVATION = "reservation"
    DEPENDENCY = "dependency"
    PREEMPTION = "preemption"
    ADMISSION = "admission"
    BACKOFF = "backoff"
    ARRAY_THROTTLE = "array_throttle"


class PreemptionCause(enum.StrEnum):
    PRIORITY = "priority"  # the victim has strictly lower priority
    RECLAIM = "reclaim"  # the victim borrows quota its cohort's owner now needs


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A job waiting to be bound. `request` is the whole shape (a gang when `tasks` > 1; CPU
    and memory are per task). `seq` breaks ties of `submitted_at` (unique per job).
    `runtime_estimate_s` is the job's time limit (an upper bound, used by backfill; None =
    unknown). `waiting_on`: ids of dependencies not yet satisfied. `nominated`: victims were
    preempted for this job (the caller sets it from `Decision.preemptions` and keeps it until
    the job is bound); it then goes ahead of every job not past the aging bound, so what its
    victims free is not taken by another job first (Kubernetes' nominated node)."""

    id: str
    tenant: str
    request: GpuRequest
    submitted_at: float
    seq: int
    priority: int = 0
    priority_class: str = ""
    preemptible: bool = True
    runtime_estimate_s: float | None = None
    waiting_on: frozenset[str] = frozenset()
    nominated: bool = False

    @property
    def gpu_milli(self) -> int:
        r = self.request
        return r.tasks * r.gpus * r.gpu_milli

    @property
    def cpu_milli(self) -> int:
        return self.request.tasks * self.request.cpu_milli

    @property
    def memory_bytes(self) -> int:
        return self.request.tasks * self.request.memory_bytes

    @property
    def gpu_memory_bytes(self) -> int:
        r = self.request
        return r.tasks * r.gpus * r.gpu_memory_bytes


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job that holds `tasks` (every task of its gang). `cpu_milli` / `memory_bytes` are per
    task, as bound in the view. `borrowing`: admitted over its tenant's nominal quota.
    `progress` in 0..1. `expected_end`: started_at + time limit (None = unknown).
    `terminating`: already told to stop; its resources are about to come back.
    `submitted_at`: the job's submission time (None = unknown); re-queued after preemption a
    job keeps it, so `decide` never picks a victim that has waited past `aging_bound_s` and
    would be examined before its preemptor (it would only take its GPUs back: a livelock).
    `spread`: its spread group (`JobSpec.spread`), whose pending members avoid its nodes."""

    id: str
    tenant: str
    tasks: tuple[TaskPlacement, ...]
    started_at: float
    priority: int = 0
    preemptible: bool = True
    cpu_milli: int = 0
    memory_bytes: int = 0
    gpu_memory_bytes: int = 0
    borrowing: bool = False
    progress: float = 0.0
    expected_end: float | None = None
    terminating: bool = False
    submitted_at: float | None = None
    spread: str = ""

    @property
    def gpu_milli(self) -> int:
        return sum(s.milli for t in self.tasks for s in t.gpus)

    @property
    def total_cpu_milli(self) -> int:
        return self.cpu_milli * len(self.tasks)

    @property
    def total_memory_bytes(self) -> int:
        return self.memory_bytes * len(self.tasks)


@dataclass(frozen=True, slots=True)
class Quota:
    """A tenant's quota (Kueue's ClusterQueue). `gpus`: nominal (guaranteed) GPUs.
    `gpu_memory_bytes` / `cpu_milli`: hard caps (None = no cap). `borrowing_limit`: GPUs it may
    use beyond `gpus` from idle quota of its cohort (None = no limit; 0 = never borrows).
    `lending_limit`: GPUs of its idle quota the cohort may borrow (None = all of it).
    A tenant without a cohort never borrows nor lends."""

    gpus: int
    gpu_memory_bytes: int | None = None
    cpu_milli: int | None = None
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    cohort: str | None = None

    def __post_init__(self) -> None:
        for name in ("gpus", "gpu_memory_bytes", "cpu_milli", "borrowing_limit", "lending_limit"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"quota {name} must be >= 0, got {value}")

    @property
    def nominal_milli(self) -> int:
        return self.gpus * MILLI

    @property
    def lendable_milli(self) -> int:
        limit = self.gpus if self.lending_limit is None else min(self.gpus, self.lending_limit)
        return limit * MILLI


@dataclass(frozen=True, slots=True)
class SchedulerPolicy:
    """Which policies compose (docs/scheduling.md).

    `order`: FIFO or PRIORITY. `aging_rate`: priority points a waiting job gains per second
    (PRIORITY only). `aging_bound_s`: a job that has waited this long goes ahead of every job
    that has waited less (oldest first), so nothing starves; None = no bound.
    `fair_share`: interleave tenants by weighted dominant resource share (DRF over GPU, CPU,
    memory) at equal effective priority; `weights` per tenant (default 1).
    `backfill`: EASY backfill behind one reservation; off = strict order (the first job that
    does not fit holds everything behind it). `preemption`: may choose victims.
    `max_jobs`: jobs examined per cycle; `max_preemptors`: jobs that may choose victims per
    cycle; `max_victims_per_node`: candidates per node in the exact victim search.
    `min_runtime_s`: a running job is never a victim before it has run this long (Slurm's
    PreemptExemptTime), so preemption cannot thrash a job that keeps being re-placed."""

    order: QueueOrder = QueueOrder.FIFO
    aging_rate: float = 0.0
    aging_bound_s: float | None = None
    fair_share: bool = False
    weights: Mapping[str, float] = field(default_factory=dict)
    backfill: bool = False
    preemption: bool = False
    max_jobs: int = 1000
    max_preemptors: int = 1
    max_victims_per_node: int = 8
    min_runtime_s: float = 0.0

    def __post_init__(self) -> None:
        if self.min_runtime_s < 0:
            raise ValueError(f"min_runtime_s must be >= 0, got {self.min_runtime_s}")
        if self.aging_rate < 0:
            raise ValueError(f"aging_rate must be >= 0, got {self.aging_rate}")
        if self.aging_bound_s is not None and self.aging_bound_s <= 0:
            raise ValueError(f"aging_bound_s must be > 0, got {self.aging_bound_s}")
        if any(w <= 0 for w in self.weights.values()):
            raise ValueError(f"weights must be > 0, got {dict(self.weights)}")
        for name in ("max_jobs", "max_preemptors", "max_victims_per_node"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    def weight(self, tenant: str) -> float:
        return self.weights.get(tenant, 1.0)


@dataclass(frozen=True, slots=True)
class PendingReason:
    """Why one job waits: a code and a one-line message for people."""

    code: PendingCode
    message: str


@dataclass(frozen=True, slots=True)
class Preemption:
    """Stop running job `victim` (its whole gang) to make room for pending job `preemptor`."""

    victim: str
    preemptor: str
    cause: PreemptionCause


@dataclass(frozen=True, slots=True)
class Reservation:
    """The head job's reservation: it will fit on `placement` by time `at` (inf = only once
    jobs of unknown end finish). Backfilled jobs never delay it."""

    job: str
    at: float
    placement: GangPlacement


@dataclass(frozen=True, slots=True)
class Decision:
    """One scheduling cycle's answer. Every pending job is in exactly one of `binds` and
    `pending_reasons`; `borrowing` lists bound jobs admitted over their nominal quota.
    `examined` counts jobs considered (at most `policy.max_jobs`)."""

    binds: Mapping[str, GangPlacement]
    preemptions: tuple[Preemption, ...]
    pending_reasons: Mapping[str, PendingReason]
    borrowing: frozenset[str] = frozenset()
    reservation: Reservation | None = None
    examined: int = 0
