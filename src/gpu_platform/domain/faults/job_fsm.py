"""The job lifecycle as one transition table.

Theory of operation: a job moves only by feeding a `JobInput` to `transition`. The table maps
(state, input) to (next state, effects); a pair that is not in the table is illegal and raises
`IllegalTransition`, so no path exists that the table does not name. Effects tell the caller what
the move implies outside the job record; the caller, not this module, carries them out:
RELEASE_GPUS frees the allocation now (the attempt's process has ended, or never started);
STOP_PROCESS asks for the process to be stopped, and the allocation stays held until the
runner reports the attempt ended — a GPU is never handed on while a process may still use it.

    PENDING --accept--> QUEUED --bind--> SCHEDULED --start--> RUNNING --complete--> COMPLETED
                          ^                  |                   |  \\--fail/abort--> FAILED
                          |                  |--fail/abort------>|   \\--preempt-----> PREEMPTED
                          '-----requeue------------------------------------------------'
    any non-terminal --cancel--> CANCELLED;  PENDING --reject--> FAILED
"""

from __future__ import annotations

import enum
from dataclasses import replace

from gpu_platform.domain.errors import IllegalTransition
from gpu_platform.domain.model.job import Allocation, Job, JobState

__all__ = ["JOB_TRANSITIONS", "JobEffect", "JobInput", "transition"]


class JobInput(enum.StrEnum):
    ACCEPT = "accept"  # admission passed
    REJECT = "reject"  # admission refused
    BIND = "bind"  # GPUs reserved for a new attempt
    START = "start"  # the attempt's process is running
    COMPLETE = "complete"  # the attempt exited 0
    FAIL = "fail"  # the attempt ended unsuccessfully (non-zero exit, signal, could not start)
    ABORT = "abort"  # the job is failed while its process may still run (fault, shutdown)
    PREEMPT = "preempt"  # the attempt is stopped to make room, or was lost; will be requeued
    REQUEUE = "requeue"  # a preempted job goes back to the queue
    CANCEL = "cancel"  # the user or an admin cancelled it


class JobEffect(enum.Flag):
    NONE = 0
    RELEASE_GPUS = enum.auto()  # the allocation stops counting against its GPUs now
    STOP_PROCESS = enum.auto()  # stop the process; GPUs stay held until it has ended


S, In, E = JobState, JobInput, JobEffect
_RELEASE = E.RELEASE_GPUS
_STOP = E.STOP_PROCESS

JOB_TRANSITIONS: dict[tuple[JobState, JobInput], tuple[JobState, JobEffect]] = {
    (S.PENDING, In.ACCEPT): (S.QUEUED, E.NONE),
    (S.PENDING, In.REJECT): (S.FAILED, E.NONE),
    (S.PENDING, In.CANCEL): (S.CANCELLED, E.NONE),
    (S.QUEUED, In.BIND): (S.SCHEDULED, E.NONE),
    (S.QUEUED, In.CANCEL): (S.CANCELLED, E.NONE),
    (S.SCHEDULED, In.START): (S.RUNNING, E.NONE),
    (S.SCHEDULED, In.FAIL): (S.FAILED, _RELEASE),
    (S.SCHEDULED, In.ABORT): (S.FAILED, _STOP),
    (S.SCHEDULED, In.PREEMPT): (S.PREEMPTED, _STOP),
    (S.SCHEDULED, In.CANCEL): (S.CANCELLED, _STOP),
    (S.RUNNING, In.COMPLETE): (S.COMPLETED, _RELEASE),
    (S.RUNNING, In.FAIL): (S.FAILED, _RELEASE),
    (S.RUNNING, In.ABORT): (S.FAILED, _STOP),
    (S.RUNNING, In.PREEMPT): (S.PREEMPTED, _STOP),
    (S.RUNNING, In.CANCEL): (S.CANCELLED, _STOP),
    (S.PREEMPTED, In.REQUEUE): (S.QUEUED, E.NONE),
    (S.PREEMPTED, In.CANCEL): (S.CANCELLED, E.NONE),
}


def transition(
    job: Job,
    event: JobInput,
    now: float,
    *,
    reason: str = "",
    allocation: Allocation | None = None,
    exit_code: int | None = None,
) -> tuple[Job, JobEffect]:
    """Apply `event` to `job` at time `now`; return the new snapshot and the effects.

    BIND requires `allocation` and starts a new attempt; START stamps `started_at`; terminal
    moves stamp `finished_at`. Raises IllegalTransition for a pair not in the table.
    """
    try:
        new_state, effects = JOB_TRANSITIONS[(job.state, event)]
    except KeyError:
        raise IllegalTransition("job", job.state, event) from None
    changes: dict[str, object] = {
        "state": new_state,
        "reason": reason,
        "history": (*job.history, (now, new_state, reason)),
    }
    if event is JobInput.BIND:
        if allocation is None:
            raise ValueError("bind needs an allocation")
        changes.update(
            allocation=allocation,
            attempt=job.attempt + 1,
            started_at=None,
            finished_at=None,
            exit_code=None,
        )
    elif event is JobInput.START:
        changes["started_at"] = now
    if exit_code is not None:
        changes["exit_code"] = exit_code
    if JobEffect.STOP_PROCESS in effects:
        changes["releasing"] = True
    if new_state in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED):
        changes["finished_at"] = now
    return replace(job, **changes), effects  # type: ignore[arg-type]
