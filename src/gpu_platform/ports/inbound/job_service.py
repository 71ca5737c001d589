"""JobService: the use cases REST, gRPC and the CLI drive, and the read models they return."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gpu_platform.domain.model.gpu import Gpu, GpuState
from gpu_platform.domain.model.job import Job, JobSpec
from gpu_platform.domain.scheduling.model import PendingReason

__all__ = ["ClusterStatus", "GpuInfo", "JobService"]


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """A GPU with its effective state, the job holding it (if any), why it is in its own
    state (a fault, an operator) and whether the thermal policy keeps new work off it."""

    gpu: Gpu
    state: GpuState
    job_id: str | None
    reason: str = ""
    hot: bool = False


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    inventory_source: str
    simulated: bool
    nodes: int
    gpus_total: int
    gpus_free: int
    jobs_by_state: dict[str, int]
    notes: tuple[str, ...]


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
