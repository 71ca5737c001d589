"""JobService: the use cases REST, gRPC and the CLI drive, and the read models they return."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gpu_platform.domain.gpu_shares import Share
from gpu_platform.domain.model.gpu import Gpu, GpuState
from gpu_platform.domain.model.job import Job, JobSpec, JobState
from gpu_platform.domain.model.job_array import ArraySpec, format_array
from gpu_platform.domain.scheduling.model import PendingReason

__all__ = ["ArrayInfo", "ClusterStatus", "GpuInfo", "JobService"]


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """A GPU with its effective state, the job holding it (if any), why it is in its own
    state (a fault, an operator) and whether the thermal policy keeps new work off it."""

    gpu: Gpu
    state: GpuState
    job_id: str | None
    reason: str = ""
    hot: bool = False
    shares: tuple[Share, ...] = ()  # jobs sharing it (a share of one GPU each)


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    inventory_source: str
    simulated: bool
    nodes: int
    gpus_total: int
    gpus_free: int
    jobs_by_state: dict[str, int]
    notes: tuple[str, ...]
    gpus_shared: int = 0  # GPUs shared by jobs (shares of one GPU)
    shares: int = 0  # shares on them, in all


@dataclass(frozen=True, slots=True)
class ArrayInfo:
    """A job array: its id, the spec every task runs, its indices and throttle, when it was
    submitted, how many tasks are in each state, and the indices of the tasks still waiting
    (Slurm's text, e.g. `5-999%64`; '' when none waits)."""

    id: str
    spec: JobSpec
    array: ArraySpec
    submitted_at: float
    states: dict[str, int]
    waiting: str

    @classmethod
    def of(cls, array_id: str, array: ArraySpec, tasks: Sequence[Job]) -> ArrayInfo:
        """The summary of `tasks` (every task of the array, index order)."""
        states = Counter(str(t.state) for t in tasks)
        waiting = [
            t.array.index
            for t in tasks
            if t.array is not None and t.state in (JobState.PENDING, JobState.QUEUED)
        ]
        text = format_array(ArraySpec(tuple(waiting), array.throttle)) if waiting else ""
        return cls(array_id, tasks[0].spec, array, tasks[0].submitted_at, dict(states), text)


@runtime_checkable
class JobService(Protocol):
    """Submit, inspect and cancel jobs; inspect GPUs and the cluster.

    Errors: `InvalidRequest` (field named) for a request that can never run, `NotFound` for an
    unknown id, `Conflict` for cancelling or killing a job that has already ended. Thread-safe.
    """

    def submit(self, spec: JobSpec) -> Job: ...

    def get(self, job_id: str) -> Job: ...

    def list_jobs(self, state: str | None = None) -> list[Job]: ...

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> Job: ...

    def why(self, job_id: str) -> PendingReason | None:
        """Why a QUEUED job waits, as of the last scheduling cycle; None for any other job."""
        ...

    def kill(self, job_id: str, reason: str = "killed by user") -> Job:
        """Cancel without a grace period: a running attempt gets SIGKILL at once."""
        ...

    def logs(
        self, job_id: str, attempt: int | None = None, tail_bytes: int = 65536, rank: int = 0
    ) -> str:
        """The tail of task `rank`'s log of `attempt` (default: the latest)."""
        ...

    def log_from(
        self, job_id: str, attempt: int, offset: int, max_bytes: int = 65536, rank: int = 0
    ) -> tuple[bytes, bool]:
        """Log bytes of task `rank` of `attempt` from `offset`, and whether that attempt may
        still write."""
        ...

    def gpus(self) -> list[GpuInfo]: ...

    def status(self) -> ClusterStatus: ...

    def submit_array(self, spec: JobSpec, array: ArraySpec | str) -> ArrayInfo:
        """Create one job per index of `array` (ids `<array id>_<index>`) in one command.
        `array` as text is Slurm's syntax (`0-999%64`), read by `parse_array` under the
        server's configured largest index (InvalidRequest naming `array`)."""
        ...

    def get_array(self, array_id: str) -> ArrayInfo: ...

    def cancel_array(self, array_id: str, reason: str = "cancelled by user") -> ArrayInfo:
        """Cancel every task of the array that has not ended."""
        ...
