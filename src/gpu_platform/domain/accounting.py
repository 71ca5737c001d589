"""GPU-time accounting from job histories (pure).

A job consumes its GPUs from each move into RUNNING until the next move out of it (completion,
failure, cancellation, preemption); a share of one GPU consumes its fraction of it
(`gpu_milli` / 1000). A job still running is counted up to `until`. Only the part of each
interval inside [since, until) counts, so windows add up: usage(a, b) + usage(b, c) equals
usage(a, c).
"""

from __future__ import annotations

from collections.abc import Iterable

from gpu_platform.domain.model.job import Job, JobState

__all__ = ["gpu_seconds", "gpus_used", "running_intervals", "running_seconds"]


def running_intervals(job: Job, until: float) -> list[tuple[float, float]]:
    """The [start, end) intervals during which `job` was RUNNING, clipped to `until`."""
    out: list[tuple[float, float]] = []
    start: float | None = None
    for at, state, _ in job.history:
        if state is JobState.RUNNING and start is None:
            start = at
        elif state is not JobState.RUNNING and start is not None:
            out.append((start, min(at, until)))
            start = None
    if start is not None:
        out.append((start, until))
    return [(a, b) for a, b in out if b > a]


def running_seconds(job: Job, since: float, until: float) -> float:
    """Seconds `job` spent RUNNING inside [since, until)."""
    total = 0.0
    for a, b in running_intervals(job, until):
        lo, hi = max(a, since), min(b, until)
        if hi > lo:
            total += hi - lo
    return total


def gpus_used(job: Job) -> float:
    """GPUs the job consumes while it runs: its GPU count, or its fraction of one GPU."""
    return job.spec.gpus * job.spec.gpu_milli / 1000


def gpu_seconds(jobs: Iterable[Job], since: float, until: float) -> dict[str, float]:
    """GPU-seconds per job id inside [since, until) (a share: fraction x time)."""
    return {j.id: gpus_used(j) * running_seconds(j, since, until) for j in jobs}
