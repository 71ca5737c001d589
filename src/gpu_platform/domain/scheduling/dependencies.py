"""Job dependencies as the scheduler sees them (Slurm's `afterok`).

A job that depends on others may start once every one of them has COMPLETED. While one has
not ended it waits (PendingCode.DEPENDENCY); once one ended otherwise (FAILED, CANCELLED) it
can never start and the scheduling cycle cancels it. A job that waits on a dependency can
bind nothing, so it needs no scheduling cycle of its own: the cycle that follows its
dependency's end looks at it (`waits_for_dependency`). Pure functions over a job's spec and a
lookup of other jobs' states.
"""

from __future__ import annotations

from collections.abc import Callable

from gpu_platform.domain.model.job import JobSpec, JobState
from gpu_platform.domain.scheduling.model import PendingCode, PendingReason

__all__ = ["BROKEN", "dependency_reason", "unmet_dependencies", "waits_for_dependency"]

BROKEN = frozenset({JobState.FAILED, JobState.CANCELLED})  # a dependency that never completes

StateOf = Callable[[str], JobState]  # job id -> its state


def unmet_dependencies(spec: JobSpec, state_of: StateOf) -> frozenset[str]:
    """The jobs `spec` depends on that have not COMPLETED."""
    return frozenset(d for d in spec.depends_on if state_of(d) is not JobState.COMPLETED)


def waits_for_dependency(spec: JobSpec, state_of: StateOf) -> bool:
    """True when `spec` waits for a dependency that may still complete: it cannot be bound
    now, and nothing needs doing about it until that dependency ends."""
    states = [state_of(d) for d in spec.depends_on]
    return any(s is not JobState.COMPLETED for s in states) and not any(s in BROKEN for s in states)


def dependency_reason(waiting: frozenset[str]) -> PendingReason:
    """Why a job with the unmet dependencies `waiting` waits."""
    return PendingReason(PendingCode.DEPENDENCY, f"waiting for {', '.join(sorted(waiting))}")
