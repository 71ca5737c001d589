"""Scheduling: who goes next, who waits and why, who makes room (docs/scheduling.md).

`decide(now, pending, running, view, quotas, policy) -> Decision` is deterministic over
frozen inputs and the placement engine's `ClusterView` (whose free capacity it restores).
Policies compose through `SchedulerPolicy`: FIFO or priority with aging and a starvation
bound, Kueue-style quotas with cohorts (borrowing, lending, reclaim), weighted DRF across
tenants, EASY backfill, and gang-aware preemption.
"""

from gpu_platform.domain.scheduling.decide import decide
from gpu_platform.domain.scheduling.model import (
    Decision,
    PendingCode,
    PendingJob,
    PendingReason,
    Preemption,
    PreemptionCause,
    QueueOrder,
    Quota,
    Reservation,
    RunningJob,
    SchedulerPolicy,
)
from gpu_platform.domain.scheduling.order import effective_priority

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
    "decide",
    "effective_priority",
]
