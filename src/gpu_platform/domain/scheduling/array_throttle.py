"""The job-array throttle: at most N tasks of an array hold resources at once (Slurm's `%N`).

A pure eligibility rule applied before the queue policy: given the queued jobs in queue order
and the jobs that hold resources now (bound, running, or still being stopped), a task of an
array with throttle N stays eligible only while fewer than N of its array's tasks hold
resources plus the tasks of that array already let through this cycle. The rest are held back
with an `ARRAY_THROTTLE` reason. Whatever the policy then binds from the eligible jobs, an array
never has more than N tasks bound at once — the invariant `tests/property` checks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from gpu_platform.domain.model.job import Job
from gpu_platform.domain.scheduling.model import PendingCode, PendingReason

__all__ = ["hold_back_throttled"]


def hold_back_throttled(
    queued: Sequence[Job], holding: Iterable[Job]
) -> tuple[list[Job], dict[str, PendingReason]]:
    """(the eligible jobs of `queued`, in its order; why each held-back task waits).

    `holding` are the jobs holding resources now. O(len(queued) + len(holding))."""
    if not any(j.array is not None and j.array.array.throttle for j in queued):
        return list(queued), {}
    used: Counter[str] = Counter(
        j.array.array_id for j in holding if j.array is not None and j.array.array.throttle
    )
    eligible: list[Job] = []
    held: dict[str, PendingReason] = {}
    reasons: dict[str, PendingReason] = {}  # one per array: its tasks share it
    for job in queued:
        task = job.array
        if task is None or not task.array.throttle:
            eligible.append(job)
            continue
        limit = task.array.throttle
        if used[task.array_id] < limit:
            used[task.array_id] += 1
            eligible.append(job)
            continue
        reason = reasons.get(task.array_id)
        if reason is None:
            reason = reasons[task.array_id] = PendingReason(
                PendingCode.ARRAY_THROTTLE,
                f"array {task.array_id} runs at most {limit} tasks at once (%{limit})",
            )
        held[job.id] = reason
    return eligible, held
