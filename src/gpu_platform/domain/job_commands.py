"""The job commands of the cluster state machine (`ClusterState.apply` carries them out).

A job is submitted (SubmitJob), bound to GPUs (BindJob), started (StartJob) and finished
(FinishJob); it may be cancelled (CancelJob), failed while it runs (AbortJob) or put back in
the queue (RequeueJob). Reports that speak for one attempt carry its `epoch` and are ignored
when that attempt is no longer current.

`BindJob(start=True)` binds and records the start in one command (issue 21: one Raft entry
where there were two): the job goes QUEUED -> SCHEDULED -> RUNNING as if a StartJob for the
new epoch followed at once. A launch that then fails is reported as today (RequeueJob when
its node had no agent, else FinishJob with no exit code: the job fails). Records written
before the field existed decode with `start=False`: bind only, as they were applied.

Split from `cluster_state` for size; `cluster_state` re-exports every name.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_platform.domain.model.job import JobSpec

__all__ = [
    "AbortJob",
    "BindJob",
    "CancelJob",
    "FinishJob",
    "RequeueJob",
    "StartJob",
    "SubmitJob",
]


@dataclass(frozen=True, slots=True)
class SubmitJob:
    job_id: str
    spec: JobSpec
    now: float


@dataclass(frozen=True, slots=True)
class BindJob:
    """Bind task 0 to `gpu_indices` on `node`, and tasks 1..N-1 of a gang to `peers`
    ((node, GPU indices) in rank order): all tasks or none. `start`: record the start too
    (the launch follows the commit; see the module docstring)."""

    job_id: str
    node: str
    gpu_indices: tuple[int, ...]
    now: float
    peers: tuple[tuple[str, tuple[int, ...]], ...] = ()
    borrowing: bool = False
    start: bool = False


@dataclass(frozen=True, slots=True)
class StartJob:
    job_id: str
    epoch: int
    now: float


@dataclass(frozen=True, slots=True)
class FinishJob:
    """The attempt `epoch` ended with `exit_code` (None: it never started or was signalled)."""

    job_id: str
    epoch: int
    exit_code: int | None
    now: float
    reason: str = ""


@dataclass(frozen=True, slots=True)
class CancelJob:
    job_id: str
    now: float
    reason: str = "cancelled by user"


@dataclass(frozen=True, slots=True)
class AbortJob:
    """Fail the job now while attempt `epoch` may still run (fault, shutdown policy)."""

    job_id: str
    epoch: int
    now: float
    reason: str


@dataclass(frozen=True, slots=True)
class RequeueJob:
    """Attempt `epoch` was lost or preempted; put the job back in the queue. Not the job's
    fault: it counts as an interruption, never against `JobSpec.max_attempts`."""

    job_id: str
    epoch: int
    now: float
    reason: str
