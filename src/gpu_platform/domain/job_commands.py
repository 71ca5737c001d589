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

`JobHandlers` carries the commands out (a mixin of `ClusterState`: it shares that module's
state and is not used on its own). Split from `cluster_state` for size; `cluster_state`
re-exports every command.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gpu_platform.domain.allocation.mig_jobs import check_mig_request
from gpu_platform.domain.errors import Conflict, InvalidRequest, NotFound
from gpu_platform.domain.events import (
    AttemptEnded,
    DomainEvent,
    JobAborted,
    JobBound,
    JobCancelled,
    JobFinished,
    JobRequeued,
    JobStarted,
    JobSubmitted,
    StaleReportIgnored,
)
from gpu_platform.domain.faults.job_fsm import JobEffect, JobInput, transition
from gpu_platform.domain.gpu_shares import ShareBook, check_share_request
from gpu_platform.domain.hardware_facts import HardwareFacts
from gpu_platform.domain.model.gpu import Gpu
from gpu_platform.domain.model.job import Allocation, Job, JobSpec, JobState, TaskSlot
from gpu_platform.domain.model.node import Node, NodeState

__all__ = [
    "AbortJob",
    "BindJob",
    "CancelJob",
    "FinishJob",
    "JobHandlers",
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


class JobHandlers:
    """The job half of ClusterState; see the module docstring."""

    _nodes: dict[str, Node]
    _jobs: dict[str, Job]
    _held: dict[str, str]
    _shares: ShareBook
    _hot: dict[str, float]
    next_epoch: int
    next_seq: int

    if TYPE_CHECKING:

        def job(self, job_id: str) -> Job: ...

        def _gpus_by_uuid(self) -> dict[str, Gpu]: ...

        def max_gpus_per_node(self) -> int: ...

        def hardware_facts(self) -> HardwareFacts: ...

        def cpu_used(self, name: str) -> int: ...

        def _touch(self, node: str) -> None: ...

    def _submit(self, cmd: SubmitJob) -> list[DomainEvent]:
        if cmd.job_id in self._jobs:
            first = self._jobs[cmd.job_id].spec
            token = cmd.spec.client_token
            if token is not None and first.client_token == token:
                if first == cmd.spec:  # a retry of one submission: the job exists once
                    return []
                raise Conflict(f"client token {token!r} was used for a different request")
            raise Conflict(f"job {cmd.job_id} already exists")
        spec = cmd.spec
        self._check_spec(spec)
        job = Job(cmd.job_id, spec, JobState.PENDING, cmd.now, seq=self.next_seq)
        job, _ = transition(job, JobInput.ACCEPT, cmd.now, reason="admitted")
        self.next_seq += 1
        self._jobs[job.id] = job
        return [JobSubmitted(job.id, spec.gpus * spec.tasks)]

    def _check_spec(self, spec: JobSpec) -> None:
        """Refuse (InvalidRequest) a spec this cluster could never run."""
        facts = self.hardware_facts()  # O(1) between node writes (domain.hardware_facts)
        if spec.gpu_models and spec.gpus:
            known = facts.models
            if not known & set(spec.gpu_models):
                raise InvalidRequest(
                    "gpu_models",
                    f"no GPU of model {' or '.join(spec.gpu_models)} in the cluster "
                    f"(it has {', '.join(sorted(known)) or 'none'}); it could never be placed",
                )
        check_share_request(spec, facts.largest_per_vendor)
        if spec.mig_profile is not None:
            check_mig_request(spec.mig_profile, spec.gpus, facts.models, spec.gpu_models)
        capacity = facts.max_gpus_per_node
        if spec.gpus > capacity:
            raise InvalidRequest(
                "gpus",
                f"requests {spec.gpus} GPUs but the largest node has {capacity}; "
                "this job could never be placed",
            )
        if spec.tasks > 1:
            slots = facts.slots(spec.gpus)
            if spec.tasks > slots:
                raise InvalidRequest(
                    "tasks",
                    f"a gang of {spec.tasks} tasks x {spec.gpus} GPUs needs more room than the "
                    f"whole cluster has ({slots} such tasks); it could never be placed",
                )
        # another tenant's job answers as an unknown one: no probing which ids exist
        unknown = [
            d
            for d in spec.depends_on
            if d not in self._jobs or self._jobs[d].spec.tenant != spec.tenant
        ]
        if unknown:
            raise InvalidRequest("depends_on", f"no such job: {', '.join(unknown)}")

    def _bind(self, cmd: BindJob) -> list[DomainEvent]:
        job = self.job(cmd.job_id)
        if job.state is not JobState.QUEUED:
            raise Conflict(f"job {job.id} is {job.state}, not QUEUED")
        if job.releasing:
            raise Conflict(f"job {job.id}: its previous attempt is still being stopped")
        wanted = ((cmd.node, cmd.gpu_indices), *cmd.peers)
        if len(wanted) != job.spec.tasks:
            raise Conflict(f"job {job.id} has {job.spec.tasks} tasks, got {len(wanted)} slots")
        slots = [self._slot(job, node, indices) for node, indices in wanted]
        self._check_cpu(job, [s.node for s in slots])
        uuids = [u for slot in slots for u in slot.gpu_uuids]
        if len(set(uuids)) != len(uuids):
            raise Conflict(f"job {job.id}: two tasks bound to one GPU")
        first = slots[0]
        allocation = Allocation(
            node=first.node,
            gpu_indices=first.gpu_indices,
            gpu_uuids=first.gpu_uuids,
            epoch=self.next_epoch,
            numa_nodes=first.numa_nodes,
            peers=tuple(slots[1:]),
        )
        self.next_epoch += 1
        job, _ = transition(job, JobInput.BIND, cmd.now, reason="bound", allocation=allocation)
        job = replace(job, borrowing=cmd.borrowing)
        self._jobs[job.id] = job
        self._shares.hold(job, {g.uuid: g for s in slots for g in self._slot_gpus(s)})
        for uuid in () if job.shares_gpu else allocation.all_gpu_uuids:
            self._held[uuid] = job.id
        for name in allocation.nodes:
            self._touch(name)
        bound: list[DomainEvent] = [JobBound(job.id, allocation, job.attempt)]
        if cmd.start:  # bind and start in one command (domain.job_commands)
            return bound + self._start(StartJob(job.id, allocation.epoch, cmd.now))
        return bound

    def _slot(self, job: Job, name: str, indices: tuple[int, ...]) -> TaskSlot:
        """Validate one task's GPUs on `name` for a bind; raise Conflict/NotFound if unusable."""
        node = self._nodes.get(name)
        if node is None:
            raise NotFound("node", name)
        if len(indices) != job.spec.gpus or len(set(indices)) != job.spec.gpus:
            raise Conflict(f"job {job.id} needs {job.spec.gpus} distinct GPUs, got {indices}")
        if node.state is not NodeState.READY:  # checked for every job, GPU-less ones too
            raise Conflict(f"node {node.name} is {node.state}")
        gpus = []
        for index in indices:
            try:
                gpu = node.gpu(index)
            except KeyError:
                raise NotFound("gpu", f"{node.name}/{index}") from None
            if not gpu.schedulable:
                raise Conflict(f"gpu {node.name}/{index} is {gpu.state}")
            if gpu.uuid in self._hot:
                raise Conflict(f"gpu {node.name}/{index} is too hot")
            if gpu.uuid in self._held:
                raise Conflict(f"gpu {node.name}/{index} is held by {self._held[gpu.uuid]}")
            if job.shares_gpu:
                why = self._shares.refusal(gpu, job)
                if why is not None:
                    raise Conflict(f"gpu {node.name}/{index}: {why}")
            elif gpu.uuid in self._shares.gpus:
                sharers = ", ".join(self._shares.sharers(gpu.uuid))
                raise Conflict(f"gpu {node.name}/{index} is shared by {sharers}")
            gpus.append(gpu)
        return TaskSlot(
            node=node.name,
            gpu_indices=tuple(g.index for g in gpus),
            gpu_uuids=tuple(g.uuid for g in gpus),
            numa_nodes=tuple(sorted({g.numa_node for g in gpus if g.numa_node >= 0})),
        )

    def _slot_gpus(self, slot: TaskSlot) -> list[Gpu]:
        node = self._nodes[slot.node]
        return [node.gpu(i) for i in slot.gpu_indices]

    def _check_cpu(self, job: Job, nodes: list[str]) -> None:
        """Conflict unless every node has the CPU milli-cores its tasks of `job` ask for."""
        want = job.spec.cpu_milli
        for name in dict.fromkeys(nodes) if want else ():
            cap = self._nodes[name].cpus * 1000
            need = want * nodes.count(name)
            if cap and self.cpu_used(name) + need > cap:
                raise Conflict(
                    f"node {name}: {self.cpu_used(name)} of {cap} CPU milli-cores are asked "
                    f"for; job {job.id} needs {need} more"
                )

    def _current(self, job: Job, epoch: int, states: tuple[JobState, ...]) -> bool:
        return job.state in states and job.allocation is not None and job.allocation.epoch == epoch

    def _start(self, cmd: StartJob) -> list[DomainEvent]:
        job = self.job(cmd.job_id)
        if not self._current(job, cmd.epoch, (JobState.SCHEDULED,)):
            return [StaleReportIgnored(job.id, cmd.epoch, f"start report while {job.state}")]
        job, _ = transition(job, JobInput.START, cmd.now, reason="started")
        self._jobs[job.id] = job
        return [JobStarted(job.id, cmd.epoch)]

    def _finish(self, cmd: FinishJob) -> list[DomainEvent]:
        job = self.job(cmd.job_id)
        alloc = job.allocation
        if job.releasing and alloc is not None and alloc.epoch == cmd.epoch:
            self._jobs[job.id] = replace(job, releasing=False)
            self._unhold(job.id, alloc)
            return [AttemptEnded(job.id, cmd.epoch, cmd.exit_code)]
        if not self._current(job, cmd.epoch, (JobState.SCHEDULED, JobState.RUNNING)):
            return [StaleReportIgnored(job.id, cmd.epoch, f"exit report while {job.state}")]
        ok = cmd.exit_code == 0 and job.state is JobState.RUNNING
        event = JobInput.COMPLETE if ok else JobInput.FAIL
        reason = cmd.reason or ("exited 0" if ok else f"exited {cmd.exit_code}")
        job, effects = transition(job, event, cmd.now, reason=reason, exit_code=cmd.exit_code)
        self._release(job, effects)
        return [JobFinished(job.id, cmd.epoch, job.state, cmd.exit_code, reason)]

    def _cancel(self, cmd: CancelJob) -> list[DomainEvent]:
        job = self.job(cmd.job_id)
        if job.terminal:
            raise Conflict(f"job {job.id} already ended {job.state}")
        job, effects = transition(job, JobInput.CANCEL, cmd.now, reason=cmd.reason)
        self._release(job, effects)
        stop = job.allocation if JobEffect.STOP_PROCESS in effects else None
        return [JobCancelled(job.id, stop)]

    def _abort(self, cmd: AbortJob) -> list[DomainEvent]:
        job = self.job(cmd.job_id)
        if not self._current(job, cmd.epoch, (JobState.SCHEDULED, JobState.RUNNING)):
            return [StaleReportIgnored(job.id, cmd.epoch, f"abort while {job.state}")]
        job, effects = transition(job, JobInput.ABORT, cmd.now, reason=cmd.reason)
        self._release(job, effects)
        return [JobAborted(job.id, job.allocation, cmd.reason)]

    def _requeue(self, cmd: RequeueJob) -> list[DomainEvent]:
        job = self.job(cmd.job_id)
        if not self._current(job, cmd.epoch, (JobState.SCHEDULED, JobState.RUNNING)):
            return [StaleReportIgnored(job.id, cmd.epoch, f"requeue while {job.state}")]
        stop = job.allocation
        job, effects = transition(job, JobInput.PREEMPT, cmd.now, reason=cmd.reason)
        self._release(job, effects)
        job, _ = transition(job, JobInput.REQUEUE, cmd.now, reason=cmd.reason)
        self._jobs[job.id] = replace(job, interruptions=job.interruptions + 1)
        return [JobRequeued(job.id, stop, cmd.reason)]

    def _release(self, job: Job, effects: JobEffect) -> None:
        self._jobs[job.id] = job
        if JobEffect.RELEASE_GPUS in effects and job.allocation is not None:
            self._unhold(job.id, job.allocation)

    def _unhold(self, job_id: str, allocation: Allocation) -> None:
        self._shares.unhold(self._jobs[job_id], allocation)
        for uuid in allocation.all_gpu_uuids:
            if self._held.get(uuid) == job_id:
                del self._held[uuid]
        for name in allocation.nodes:
            self._touch(name)
