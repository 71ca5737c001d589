"""Launching: binding a cycle's placements and starting every task of each bound attempt.

A bind records the start too (`BindJob(start=True)`, issue 21: one command per job where
there were two); the launch follows its commit, and a launch that fails is reported as
before: re-queued when its node had no agent, else finished with the launch error (the job
fails). Embedded, each bind is one command and its launch follows under the lock.
Replicated, a cycle's binds are one `JobBatch` (one Raft entry), then the bound jobs are
launched (the jobs of different first nodes at once: each launch waits for its agent). A
task's exit comes back through `on_exit`: the attempt's exit is recorded when its last task
has ended (a gang fails whole), replicated through `finishing` (exits reported together are
committed together).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence

import structlog

from gpu_platform.application.agent_hub import AgentUnavailable
from gpu_platform.application.control.finishing import Finishing
from gpu_platform.application.control.rendezvous import DEFAULT_GANG_PORT_BASE, master_endpoint
from gpu_platform.application.control.shared import LOG_NAME, Run, Shared
from gpu_platform.application.sharing import launch_fields
from gpu_platform.domain.cluster_state import BindJob, Command, FinishJob, RequeueJob, StartJob
from gpu_platform.domain.errors import DomainError, NotFound
from gpu_platform.domain.events import BatchItemRefused, DomainEvent, JobBound
from gpu_platform.domain.job_batches import JobBatch, split_outcomes
from gpu_platform.domain.model.gpu import Gpu
from gpu_platform.domain.model.job import Job, JobState
from gpu_platform.domain.model.job_array import array_env
from gpu_platform.domain.model.node import Node
from gpu_platform.domain.placement import GangPlacement
from gpu_platform.domain.scheduling.live_view import HardwareCache
from gpu_platform.domain.topology.matrix import TopologyMatrix
from gpu_platform.ports.outbound.job_runner import ExitReport, GangEnv, LaunchError, LaunchSpec
from gpu_platform.ports.outbound.trace_context import JobTraceContext

__all__ = ["Launching"]

log = structlog.get_logger(LOG_NAME)

CommitAll = Callable[[list[Command]], list[list[DomainEvent] | DomainError]]
Lost = Callable[..., None]  # (job_id, epoch, ranks, why, *, ended): the agents' `lost`


class Launching:
    """Binds and launches. `pin` pins tasks to their NUMA nodes' CPUs; `traces` gives each
    job's traceparent; `commit_all`, `effects` and `lock_let_go` are the plane's command path
    (replicated); `lost` is the agents' handling of tasks lost with their node."""

    def __init__(
        self,
        shared: Shared,
        *,
        pin: bool,
        traces: JobTraceContext,
        commit_all: CommitAll,
        effects: Callable[[list[DomainEvent]], list[DomainEvent]],
        lock_let_go: Callable[[], contextlib.AbstractContextManager[None]],
        lost: Lost,
        gang_port_base: int = DEFAULT_GANG_PORT_BASE,
    ) -> None:
        self._s = shared
        self._pin = pin
        self._gang_port_base = gang_port_base
        self._traces = traces
        self._commit_all = commit_all
        self._effects = effects
        self._lock_let_go = lock_let_go
        self._lost = lost
        self._hardware = HardwareCache()  # one NIC matrix per hardware type
        self._matrices: dict[str, tuple[object, TopologyMatrix]] = {}  # node -> (topology, m)
        self.finishing = Finishing(
            shared, commit_all=commit_all, effects=effects, lock_let_go=lock_let_go
        )

    def shutdown(self) -> None:
        """Nothing to stop: a cycle's launches are sent and awaited by the cycle itself."""

    def bind_all(
        self,
        jobs: Mapping[str, Job],
        binds: Mapping[str, GangPlacement],
        borrowing: frozenset[str] | set[str],
    ) -> int:
        """Replicated: commit every bind (and start) of the cycle as one JobBatch, then
        launch each bound job. Returns how many jobs were launched."""
        if not binds:
            return 0
        commands: list[BindJob] = []
        for job_id, placed in binds.items():
            self._s.nominated.discard(job_id)
            commands.append(self._bind_command(jobs[job_id], placed, job_id in borrowing))
        batch = JobBatch(tuple(commands))
        (result,) = self._commit_all([batch])
        if isinstance(result, DomainError):  # only a malformed batch; never expected
            raise result
        self._effects(result)
        launches: list[tuple[Job, GangPlacement, JobBound]] = []
        for (job_id, placed), outcome in zip(
            binds.items(), split_outcomes(batch, result), strict=True
        ):
            if isinstance(outcome, BatchItemRefused):
                # the lock is let go while commits are awaited: the job may have been
                # cancelled meanwhile; the replica re-validated the bind and refused it
                log.info("bind refused", job_id=job_id, error=outcome.error)
                continue
            bound = next(e for e in outcome if isinstance(e, JobBound))
            launches.append((jobs[job_id], placed, bound))
        return sum(ran for ran in self._launch_all(launches))

    def _launch_all(self, launches: list[tuple[Job, GangPlacement, JobBound]]) -> list[bool]:
        """`_launch` each bound job; on agents, every task's launch sent at once and the
        answers awaited together (`AgentHub.start_all`): one after another, a cycle would
        take one round trip to an agent per task. Each attempt's `Run` counts all its tasks
        live before its launches go out, so an exit that comes back first finds it."""
        hub = self._s.hub
        if hub is None or not launches:
            return [self._launch(*launch) for launch in launches]
        plans: list[tuple[Job, JobBound, Run, int]] = []  # ..., its first spec's index
        specs: list[LaunchSpec] = []
        for job, placed, bound in launches:
            vendors = [str(s.gpu.vendor) for t in placed.tasks for s in t.gpus]
            mine = self._task_specs(job, bound, vendors[0] if vendors else "")
            run = Run(len(bound.allocation.tasks), live=set(range(len(mine))))
            self._s.runs[(job.id, bound.allocation.epoch)] = run
            plans.append((job, bound, run, len(specs)))
            specs += mine
        with self._lock_let_go():
            errors = hub.start_all(specs, self.on_exit, self.on_exits)
        out = []
        for job, bound, run, first in plans:
            outcome = errors[first : first + len(bound.allocation.tasks)]
            failed = [(rank, e) for rank, e in enumerate(outcome) if e is not None]
            run.live.difference_update(rank for rank, _ in failed)
            if not failed:
                out.append(True)
                continue
            _, error = failed[0]  # the first failing rank's, as one after another
            run.launch_error = f"launch failed: {error}"
            out.append(
                self._launch_failed(
                    job, bound, run, unavailable=isinstance(error, AgentUnavailable)
                )
            )
        return out

    def _bind_command(self, job: Job, placed: GangPlacement, borrowing: bool) -> BindJob:
        slots = [(t.node, tuple(s.gpu.index for s in t.gpus)) for t in placed.tasks]
        (node, indices), peers = slots[0], tuple(slots[1:])
        now = self._s.now()
        return BindJob(job.id, node, indices, now, peers=peers, borrowing=borrowing, start=True)

    def bind_and_launch(self, job: Job, placed: GangPlacement, *, borrowing: bool = False) -> None:
        events = self._s.execute(self._bind_command(job, placed, borrowing))
        bound = next(e for e in events if isinstance(e, JobBound))
        self._launch(job, placed, bound)

    def _launch(self, job: Job, placed: GangPlacement, bound: JobBound) -> bool:
        """Start every task of a bound (and started) attempt; True when all run, else False
        (the attempt was recorded ended or re-queued here)."""
        alloc = bound.allocation
        vendors = [str(s.gpu.vendor) for t in placed.tasks for s in t.gpus]
        run = self._s.runs[(job.id, alloc.epoch)] = Run(len(alloc.tasks))
        unavailable = False
        for rank, spec in enumerate(self._task_specs(job, bound, vendors[0] if vendors else "")):
            try:
                self._s.runner.start(spec, self.on_exit)
            except LaunchError as exc:
                run.launch_error = f"launch failed: {exc}"
                unavailable = isinstance(exc, AgentUnavailable)
                break
            run.live.add(rank)
        if not run.launch_error:
            return True
        return self._launch_failed(job, bound, run, unavailable=unavailable)

    def _launch_failed(self, job: Job, bound: JobBound, run: Run, *, unavailable: bool) -> bool:
        """A launch failed (`run.launch_error`): re-queue the job when its node had no agent
        (`unavailable`), else stop what started and finish the attempt with the error."""
        alloc = bound.allocation
        if unavailable:  # no fault of the job: it waits for another placement
            why = run.launch_error
            self._s.execute(RequeueJob(job.id, alloc.epoch, self._s.now(), why))
            if not run.live:  # nothing runs: the GPUs are free at once
                self._s.runs.pop((job.id, alloc.epoch), None)
                self._s.execute(FinishJob(job.id, alloc.epoch, None, self._s.now(), why))
            return False
        if not run.live or not self._s.runner.stop(job.id, alloc.epoch, self._s.grace):
            self._s.runs.pop((job.id, alloc.epoch), None)
            self._s.execute(FinishJob(job.id, alloc.epoch, None, self._s.now(), run.launch_error))
        return False

    def _task_specs(self, job: Job, bound: JobBound, vendor: str) -> list[LaunchSpec]:
        """One LaunchSpec per task, rank order. A gang's tasks get torchrun's rendezvous
        (`rendezvous.master_endpoint`: rank 0's node and a port every task is given)."""
        alloc = bound.allocation
        tasks = alloc.tasks
        node_order = list(alloc.nodes)
        master, port = master_endpoint(
            job.id, self._s.state.node(tasks[0].node), tasks, self._gang_port_base
        )
        specs = []
        for rank, slot in enumerate(tasks):
            node = self._s.state.node(slot.node)
            cpus: tuple[int, ...] = ()
            if self._pin and slot.numa_nodes:
                local = {n.id: n.cpus for n in node.numa_nodes}
                cpus = tuple(sorted(c for numa in slot.numa_nodes for c in local.get(numa, ())))
            same_node = [r for r, t in enumerate(tasks) if t.node == slot.node]
            gang = None
            if len(tasks) > 1:
                gang = GangEnv(
                    world_size=len(tasks),
                    local_rank=same_node.index(rank),
                    local_world_size=len(same_node),
                    node_rank=node_order.index(slot.node),
                    master_addr=master,
                    master_port=port,
                )
            specs.append(
                LaunchSpec(
                    job_id=job.id,
                    epoch=alloc.epoch,
                    attempt=bound.attempt,
                    argv=job.spec.command,
                    env=job.spec.env if job.array is None else job.spec.env + array_env(job.array),
                    gpu_indices=slot.gpu_indices,
                    gpu_uuids=slot.gpu_uuids,
                    cwd=job.spec.cwd,
                    vendor=vendor or "nvidia",
                    cpus=cpus,
                    mems=slot.numa_nodes if cpus else (),
                    memory_bytes=job.spec.memory_bytes,
                    time_limit_s=job.spec.time_limit_s,
                    user=job.spec.user,
                    nics=self._nearest_nics(node, slot.gpu_indices),
                    rank=rank,
                    gang=gang,
                    node=slot.node,
                    tenant=job.spec.tenant,
                    traceparent=self._traces.traceparent(job.id) or "",
                    mig_profile=job.spec.mig_profile,
                    image=job.spec.image,
                    mounts=job.spec.mounts,
                    **launch_fields(job.id, job.spec, _first_gpu(node, slot.gpu_indices)),
                )
            )
        return specs

    def _nearest_nics(self, node: Node, gpus: tuple[int, ...]) -> tuple[str, ...]:
        """RDMA NICs closest to the job's GPUs (NCCL's choice), in GPU order, no repeats."""
        if node.topology is None or not gpus:
            return ()
        seen = self._matrices.get(node.name)
        if seen is not None and seen[0] is node.topology:
            matrix = seen[1]
        else:  # a new node, or its topology changed: by hardware signature, not by name
            matrix = self._hardware.rdma_matrix(node.topology)
            self._matrices[node.name] = (node.topology, matrix)
        out: list[str] = []
        for gpu in gpus:
            if gpu in matrix.gpus:
                out += [n for n in matrix.nearest_nics(gpu) if n not in out]
        return tuple(out)

    def on_exit(self, report: ExitReport) -> None:
        """A task ended. The attempt's exit is recorded when its last task has ended: with the
        first failing task's code and reason (the rest of a gang is stopped at once). A task its
        node's lease fence stopped was lost with the node, not failed: the job is re-queued."""
        self.on_exits([report])

    def on_exits(self, reports: Sequence[ExitReport]) -> None:
        """`on_exit` for each report, the attempts that ended committed together (one agent's
        exits, reported at once, are one batch); returns once they are committed."""
        for report in reports:
            if report.fenced:
                self._lost(report.job_id, report.epoch, {report.rank}, report.reason, ended=True)
                self._s.wake.set()
        finishes: list[FinishJob] = []
        with self._s.lock:
            for report in reports:
                finish = None if report.fenced else self._ended(report)
                if finish is not None:
                    finishes.append(finish)
            if finishes:
                self.finishing.finish_all(finishes)
        if finishes:
            self._s.wake.set()

    def _ended(self, report: ExitReport) -> FinishJob | None:
        """Account one task's exit (under the lock); the attempt's FinishJob once its last
        task has ended, else None."""
        key = (report.job_id, report.epoch)
        self._record_start(report)
        run = self._s.runs.get(key)
        if run is None:  # not started by this incarnation's bookkeeping: report it as is
            return FinishJob(*key, report.exit_code, self._s.now(), report.reason)
        run.live.discard(report.rank)
        failed = report.exit_code != 0
        if failed and run.failure is None and not run.launch_error:
            run.failure = report
            if run.live:
                log.warning(
                    "gang task failed: stopping the whole gang",
                    job_id=report.job_id,
                    epoch=report.epoch,
                    rank=report.rank,
                    reason=report.reason,
                )
                self._s.runner.stop(report.job_id, report.epoch, self._s.grace)
        if run.live:
            return None
        del self._s.runs[key]
        code, reason = report.exit_code, report.reason
        if run.launch_error:
            code, reason = None, run.launch_error
        elif run.failure is not None:
            code, reason = run.failure.exit_code, run.failure.reason
            if run.tasks > 1:
                reason = f"task {run.failure.rank} {reason}; the gang was stopped whole"
        return FinishJob(*key, code, self._s.now(), reason)

    def _record_start(self, report: ExitReport) -> None:
        """A task ended whose start was never recorded (bound by a leader that recorded the
        start apart and failed between the two): it did run, so record the start first —
        its exit code then counts."""
        if self._s.replication is None:
            return
        try:
            job = self._s.state.job(report.job_id)
        except NotFound:
            return
        alloc = job.allocation
        if job.state is JobState.SCHEDULED and alloc is not None and alloc.epoch == report.epoch:
            self._s.execute(StartJob(job.id, report.epoch, self._s.now()))


def _first_gpu(node: Node, indices: tuple[int, ...]) -> Gpu | None:
    return node.gpu(indices[0]) if indices else None
