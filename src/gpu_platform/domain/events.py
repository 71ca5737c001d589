"""Past-tense domain events. The domain returns them; adapters turn them into logs and metrics."""

from __future__ import annotations

from dataclasses import dataclass

from gpu_platform.domain.model.job import Allocation, JobState

__all__ = [
    "AttemptEnded",
    "DomainEvent",
    "JobAborted",
    "JobBound",
    "JobCancelled",
    "JobFinished",
    "JobRequeued",
    "JobStarted",
    "JobSubmitted",
    "StaleReportIgnored",
]


@dataclass(frozen=True, slots=True)
class JobSubmitted:
    job_id: str
    gpus: int


@dataclass(frozen=True, slots=True)
class JobBound:
    job_id: str
    allocation: Allocation
    attempt: int


@dataclass(frozen=True, slots=True)
class JobStarted:
    job_id: str
    epoch: int


@dataclass(frozen=True, slots=True)
class JobFinished:
    """The attempt ended: COMPLETED (exit 0) or FAILED (non-zero exit, signal, launch error)."""

    job_id: str
    epoch: int
    state: JobState
    exit_code: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class JobCancelled:
    """`stop` is the allocation whose process must be stopped, or None if nothing ran."""

    job_id: str
    stop: Allocation | None


@dataclass(frozen=True, slots=True)
class JobRequeued:
    """An attempt was lost or preempted; `stop` is the allocation to stop, if still live."""

    job_id: str
    stop: Allocation | None
    reason: str


@dataclass(frozen=True, slots=True)
class JobAborted:
    """The job failed while its attempt may still run; `stop` is the allocation to stop."""

    job_id: str
    stop: Allocation | None
    reason: str


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    """A stopped attempt's process has ended; its GPUs are free again."""

    job_id: str
    epoch: int
    exit_code: int | None


@dataclass(frozen=True, slots=True)
class StaleReportIgnored:
    """A report from an attempt that is no longer current (fenced by its epoch)."""

    job_id: str
    epoch: int
    reason: str


DomainEvent = (
    JobSubmitted
    | JobBound
    | JobStarted
    | JobFinished
    | JobCancelled
    | JobRequeued
    | JobAborted
    | AttemptEnded
    | StaleReportIgnored
)
