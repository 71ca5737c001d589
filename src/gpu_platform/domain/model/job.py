"""Jobs: what the user asked for (JobSpec), where it runs (Allocation) and where it stands (Job).

A Job is an immutable snapshot; every change goes through the job state machine
(`domain.faults.job_fsm`) and yields a new snapshot, so the replicated state, the store and the
API always agree on one value.
"""

from __future__ import annotations

import enum
import hashlib
import re
from dataclasses import dataclass, field

from gpu_platform.domain.model.job_array import ArrayTask
from gpu_platform.domain.model.sharing import MILLI, check_share_fields

__all__ = [
    "CLIENT_TOKEN_PATTERN",
    "MAX_TASKS",
    "TERMINAL_JOB_STATES",
    "Allocation",
    "Job",
    "JobSpec",
    "JobState",
    "TaskSlot",
    "token_job_id",
    "valid_client_token",
]


class JobState(enum.StrEnum):
    """DESIGN §4: PENDING → QUEUED → SCHEDULED → RUNNING → COMPLETED | FAILED;
    RUNNING → PREEMPTED → QUEUED; any non-terminal → CANCELLED."""

    PENDING = "PENDING"
    QUEUED = "QUEUED"
    SCHEDULED = "SCHEDULED"
    RUNNING = "RUNNING"
    PREEMPTED = "PREEMPTED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL_JOB_STATES = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})
MAX_TASKS = 4096
AFFINITIES = ("none", "preferred", "required")
CLIENT_TOKEN_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
_CLIENT_TOKEN = re.compile(CLIENT_TOKEN_PATTERN)


def valid_client_token(token: str) -> bool:
    """A client's idempotency token: 1-128 of letters, digits and `_.:-` (a UUID fits)."""
    return _CLIENT_TOKEN.fullmatch(token) is not None


def token_job_id(tenant: str, token: str) -> str:
    """The job id of an idempotent submission: a function of its tenant and client token, so
    every retry of it, through any server, names the same job."""
    return "j-" + hashlib.sha256(f"{tenant}\0{token}".encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A user's request. `gpus` is a count of whole GPUs on one node for each of `tasks` tasks
    (a gang when `tasks` > 1: all tasks start together or none does); `command` is an argv;
    `memory_bytes` caps host memory (None = no cap); `time_limit_s` bounds the run time of
    each attempt in seconds (None = unbounded); `user` is the account the job runs as (None =
    the node agent's own).

    Restart policy: `max_attempts` is a budget of faults, not of starts. An attempt stopped by
    a fault of the hardware it ran on (a failed GPU, an XID, a node that went DOWN) is re-queued
    while fewer than `max_attempts` attempts have ended by a fault, waiting `retry_backoff_s *
    2**(faults-1)` seconds (capped by the fault policy); the `max_attempts`-th fault ends the
    job FAILED with the fault as its reason. Interruptions that are not the job's fault
    (preemption, quota reclaim, an operator's forced offline, a control-plane restart or a lost
    agent) re-queue the job without touching the budget.

    Scheduling: `priority` orders the queue (higher first; aging raises it while the job
    waits); `preemptible` jobs may be stopped and re-queued to make room for higher-priority
    work or for a tenant reclaiming its quota; `depends_on` names jobs that must have
    COMPLETED before this one may start.

    Placement wishes: `gpu_models` accepted GPU models (exact names as `gpu-platform gpus`
    shows them; empty = any); `nvlink` (every GPU pair of a task fabric-linked), `numa`
    (a task's GPUs on one NUMA node) and `same_rack` (a gang's nodes under one rack label)
    are "required", "preferred" (scored) or "none".

    MIG: `mig_profile` (e.g. "1g.10gb") asks for one MIG instance of that profile; the job
    holds one whole GPU of a model that has the profile (gpus must be 1) and sees only the
    instance (docs/allocation.md, "Jobs on MIG instances").

    Idempotency: `client_token` (REST `Idempotency-Key`, gRPC `request_id`) names one intended
    submission; a submit repeating a token its tenant already used returns the job the first
    one created (a different request under the same token is refused), as long as that job
    exists.

    Containers: `image` runs the command inside that container image (the node's container
    runtime; None = a bare process); `mounts` are bind mounts "HOST:CONTAINER[:ro]" of
    absolute paths, only with an image (docs/containers.md).

    Sharing (`domain.model.sharing`): `gpu_milli` < 1000 with `gpus == 1` is a share of one
    GPU, run under `sharing` ("mps" | "timeslice"; None = MPS on NVIDIA, else time-sliced);
    `gpu_memory_bytes` is a share's pinned device memory (whole GPUs: the least each must
    have); `cpu_milli` CPU milli-cores per task; `vendor` "nvidia" | "amd" | "intel".

    Spread: jobs of one `spread` group (a service's replicas) prefer nodes that hold no other
    running member of the group (a preference: they share a node when no other fits)."""

    command: tuple[str, ...]
    gpus: int = 0
    name: str = ""
    tenant: str = "default"
    priority: int = 0
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    memory_bytes: int | None = None
    time_limit_s: float | None = None
    user: str | None = None
    max_attempts: int = 3
    retry_backoff_s: float = 0.0
    tasks: int = 1
    preemptible: bool = True
    depends_on: tuple[str, ...] = ()
    gpu_models: tuple[str, ...] = ()
    nvlink: str = "preferred"
    numa: str = "preferred"
    same_rack: str = "preferred"
    mig_profile: str | None = None
    client_token: str | None = None
    image: str | None = None
    mounts: tuple[str, ...] = ()
    gpu_milli: int = MILLI
    gpu_memory_bytes: int | None = None
    cpu_milli: int = 0
    vendor: str | None = None
    sharing: str | None = None
    spread: str = ""

    def __post_init__(self) -> None:
        check_container_fields(self.image, self.mounts)
        check_share_fields(
            self.gpus,
            self.gpu_milli,
            self.gpu_memory_bytes,
            self.cpu_milli,
            self.vendor,
            self.sharing,
            self.mig_profile,
            self.tasks,
        )
        for name in ("nvlink", "numa", "same_rack"):
            if getattr(self, name) not in AFFINITIES:
                raise ValueError(f"{name} must be one of {', '.join(AFFINITIES)}")
        if not 1 <= self.tasks <= MAX_TASKS:
            raise ValueError(f"tasks must be in 1..{MAX_TASKS}, got {self.tasks}")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.retry_backoff_s < 0:
            raise ValueError(f"retry_backoff_s must be >= 0, got {self.retry_backoff_s}")
        if not self.command or not self.command[0]:
            raise ValueError("command must name a program")
        if self.mig_profile is not None and not self.mig_profile:
            raise ValueError("mig_profile must be a profile name or None")
        if self.gpus < 0:
            raise ValueError(f"gpus must be >= 0, got {self.gpus}")
        if self.memory_bytes is not None and self.memory_bytes <= 0:
            raise ValueError(f"memory_bytes must be > 0, got {self.memory_bytes}")
        if self.time_limit_s is not None and self.time_limit_s <= 0:
            raise ValueError(f"time_limit_s must be > 0, got {self.time_limit_s}")
        if self.client_token is not None and not valid_client_token(self.client_token):
            raise ValueError(f"client_token must match {CLIENT_TOKEN_PATTERN}")


def check_container_fields(image: str | None, mounts: tuple[str, ...]) -> None:
    """`image` is a non-empty reference without blanks; each mount is HOST:CONTAINER[:ro|rw]
    with two absolute paths; mounts need an image (a bare process sees the host already)."""
    if image is not None and (not image or any(c.isspace() for c in image)):
        raise ValueError(f"image must be an image reference without blanks, got {image!r}")
    if mounts and image is None:
        raise ValueError("mounts need an image: a bare process already sees the host's files")
    for mount in mounts:
        parts = mount.split(":")
        mode_ok = len(parts) == 2 or (len(parts) == 3 and parts[2] in ("ro", "rw"))
        if not mode_ok or not all(p.startswith("/") for p in parts[:2]):
            raise ValueError(f"mounts: {mount!r} is not HOST:CONTAINER[:ro] of absolute paths")


@dataclass(frozen=True, slots=True)
class TaskSlot:
    """Where one task of an attempt runs: a node, its GPUs there, the NUMA nodes to pin to."""

    node: str
    gpu_indices: tuple[int, ...]
    gpu_uuids: tuple[str, ...]
    numa_nodes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if len(self.gpu_indices) != len(self.gpu_uuids):
            raise ValueError("gpu_indices and gpu_uuids must pair up")


@dataclass(frozen=True, slots=True)
class Allocation:
    """GPUs bound to one attempt of a job. `epoch` is cluster-unique and strictly increasing:
    reports carrying an older epoch are stale and ignored (fencing).

    `node`, `gpu_indices`, `gpu_uuids` and `numa_nodes` are task 0's (the only task of an
    ordinary job); `peers` are tasks 1..N-1 of a gang, in rank order."""

    node: str
    gpu_indices: tuple[int, ...]
    gpu_uuids: tuple[str, ...]
    epoch: int
    numa_nodes: tuple[int, ...] = ()
    peers: tuple[TaskSlot, ...] = ()

    def __post_init__(self) -> None:
        if len(self.gpu_indices) != len(self.gpu_uuids):
            raise ValueError("gpu_indices and gpu_uuids must pair up")
        uuids = self.all_gpu_uuids
        if len(set(uuids)) != len(uuids):
            raise ValueError("an allocation cannot hold one GPU twice")

    @property
    def tasks(self) -> tuple[TaskSlot, ...]:
        """Every task's slot, rank 0 first."""
        first = TaskSlot(self.node, self.gpu_indices, self.gpu_uuids, self.numa_nodes)
        return (first, *self.peers)

    @property
    def all_gpu_uuids(self) -> tuple[str, ...]:
        """The GPUs of every task."""
        if not self.peers:
            return self.gpu_uuids
        return self.gpu_uuids + tuple(u for p in self.peers for u in p.gpu_uuids)

    @property
    def nodes(self) -> tuple[str, ...]:
        """The distinct nodes of the attempt, in rank order of first appearance."""
        return tuple(dict.fromkeys(t.node for t in self.tasks))


@dataclass(frozen=True, slots=True)
class Job:
    """A job snapshot. Times are seconds since the epoch as given by the caller's clock.

    `seq` is the submission order; `attempt` counts starts (0 before the first bind);
    `faults` counts attempts ended by a fault (the restart budget, `JobSpec.max_attempts`);
    `interruptions` counts attempts stopped and re-queued for reasons that are not the job's
    fault (preemption, reclaim, forced offline, control-plane restart, lost agent);
    `allocation` is set while SCHEDULED or RUNNING and kept afterwards as a record of where
    the last attempt ran. `releasing` is true while that attempt is being stopped: its GPUs
    stay held until the runner reports the process ended, whatever the job's state says.
    `not_before` is the earliest time a re-queued job may bind again (restart backoff).
    `borrowing` is true while the attempt runs on quota borrowed from its tenant's cohort (it
    is the first to be reclaimed). `array` is set for a task of a job array
    (`domain.model.job_array`).
    """

    id: str
    spec: JobSpec
    state: JobState
    submitted_at: float
    seq: int = 0
    attempt: int = 0
    faults: int = 0
    interruptions: int = 0
    allocation: Allocation | None = None
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    reason: str = ""
    releasing: bool = False
    not_before: float = 0.0
    borrowing: bool = False
    history: tuple[tuple[float, JobState, str], ...] = field(default=())
    array: ArrayTask | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_JOB_STATES

    @property
    def holds_gpus(self) -> bool:
        """True while the job's allocation counts against its GPUs."""
        if self.allocation is None:
            return False
        return self.releasing or self.state in (JobState.SCHEDULED, JobState.RUNNING)

    @property
    def shares_gpu(self) -> bool:
        """True for a share of one GPU (it holds a fraction, alongside other sharers)."""
        return self.spec.gpu_milli < MILLI and self.spec.gpus == 1
