"""Job-array commands of the cluster state machine: create an array, cancel it whole.

Theory of operation: `SubmitArray` is ONE command (one Raft entry) for the whole array. Its
apply validates the spec once, exactly as a single submit would (`ClusterState._check_spec`),
then creates every task as an ordinary QUEUED job `<array id>_<index>` sharing that spec, in
index order with consecutive sequence numbers (FIFO keeps the array's order). It returns one
`ArraySubmitted` event, however many tasks. From then on each task is a normal job: bound,
started, stopped by faults and finished through the same commands as any other.
`CancelArray` cancels every task of the array that has not ended (a single task is cancelled
with `CancelJob` as any job).

The array index (`_arrays`, array id -> spec) is derived from the jobs themselves (each task
carries its `ArrayTask`), so snapshots and stores need nothing more. Split from
`cluster_state` only for size (a mixin of `ClusterState`).

The throttle (`ArraySpec.throttle`) is a scheduling rule, not a state one: see
`domain.scheduling.array_throttle`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpu_platform.domain.errors import Conflict, NotFound
from gpu_platform.domain.events import ArraySubmitted, DomainEvent, JobCancelled
from gpu_platform.domain.faults.job_fsm import JobEffect, JobInput, transition
from gpu_platform.domain.model.job import Job, JobSpec, JobState
from gpu_platform.domain.model.job_array import ArraySpec, ArrayTask, task_id

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["ArrayHandlers", "CancelArray", "SubmitArray"]


@dataclass(frozen=True, slots=True)
class SubmitArray:
    """Create array `array_id`: one QUEUED job per index of `array`, each running `spec`."""

    array_id: str
    spec: JobSpec
    array: ArraySpec
    now: float


@dataclass(frozen=True, slots=True)
class CancelArray:
    """Cancel every task of array `array_id` that has not ended."""

    array_id: str
    now: float
    reason: str = "cancelled by user"


class ArrayHandlers:
    """The job-array half of ClusterState; see the module docstring."""

    _jobs: dict[str, Job]
    _arrays: dict[str, ArraySpec]
    next_seq: int

    if TYPE_CHECKING:

        def _check_spec(self, spec: JobSpec) -> None: ...

        def _release(self, job: Job, effects: JobEffect) -> None: ...

    def _index_arrays(self, jobs: Iterable[Job]) -> None:
        """Rebuild the array index from restored jobs."""
        for job in jobs:
            if job.array is not None:
                self._arrays.setdefault(job.array.array_id, job.array.array)

    def array(self, array_id: str) -> ArraySpec:
        """The spec of array `array_id`; NotFound if there is none."""
        try:
            return self._arrays[array_id]
        except KeyError:
            raise NotFound("array", array_id) from None

    def array_tasks(self, array_id: str) -> list[Job]:
        """Every task of array `array_id`, in index order; NotFound if there is none."""
        jobs = self._jobs
        return [jobs[task_id(array_id, i)] for i in self.array(array_id).indices]

    def _submit_array(self, cmd: SubmitArray) -> list[DomainEvent]:
        aid, spec, array, now = cmd.array_id, cmd.spec, cmd.array, cmd.now
        if aid in self._arrays or aid in self._jobs:
            raise Conflict(f"array {aid} already exists")
        ids = [task_id(aid, i) for i in array.indices]
        taken = next((j for j in ids if j in self._jobs), None)
        if taken is not None:
            raise Conflict(f"job {taken} already exists")
        self._check_spec(spec)
        history = ((now, JobState.QUEUED, "admitted"),)  # what ACCEPT gives a single submit
        seq = self.next_seq
        jobs = self._jobs
        queued = JobState.QUEUED
        for k, (job_id, index) in enumerate(zip(ids, array.indices, strict=True)):
            jobs[job_id] = Job(
                job_id,
                spec,
                queued,
                now,
                seq=seq + k,
                reason="admitted",
                history=history,
                array=ArrayTask(aid, index, array),
            )
        self.next_seq = seq + len(ids)
        self._arrays[aid] = array
        return [ArraySubmitted(aid, tuple(ids), spec.gpus * spec.tasks)]

    def _cancel_array(self, cmd: CancelArray) -> list[DomainEvent]:
        events: list[DomainEvent] = []
        for task in self.array_tasks(cmd.array_id):
            if task.terminal:
                continue
            job, effects = transition(task, JobInput.CANCEL, cmd.now, reason=cmd.reason)
            self._release(job, effects)
            stop = job.allocation if JobEffect.STOP_PROCESS in effects else None
            events.append(JobCancelled(job.id, stop))
        return events
