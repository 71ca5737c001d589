"""Scheduling: one cycle of the queue policy over the live placement view.

Each cycle cancels jobs whose dependencies can no longer complete, builds the scheduler's
view of the queue and of the running jobs, asks `domain.scheduling.decide` (docs/scheduling.md)
for binds and preemptions, stops the victims, hands the binds to launching (`bind_all`,
replicated: one commit round; `bind_and_launch`, embedded: one by one) and keeps, per waiting
job, the reason the cycle gave. Every placement decision is reported to the scheduler metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

import structlog

from gpu_platform.application.control.shared import LOG_NAME, Shared
from gpu_platform.application.sharing import placement_milli, quota_gpu_memory
from gpu_platform.domain.allocation.mig_jobs import models_hosting
from gpu_platform.domain.cluster_state import CancelJob, RequeueJob
from gpu_platform.domain.errors import Conflict
from gpu_platform.domain.model.job import Job, JobSpec, JobState
from gpu_platform.domain.placement import (
    Affinity,
    ClusterView,
    GangPlacement,
    GpuRequest,
    GpuShare,
    Score,
    TaskPlacement,
    Unschedulable,
    place,
)
from gpu_platform.domain.scheduling import (
    PendingCode,
    PendingJob,
    PendingReason,
    Quota,
    RunningJob,
    SchedulerPolicy,
    decide,
)
from gpu_platform.domain.scheduling.array_throttle import hold_back_throttled
from gpu_platform.domain.scheduling.dependencies import (
    BROKEN,
    dependency_reason,
    unmet_dependencies,
    waits_for_dependency,
)
from gpu_platform.domain.scheduling.live_view import LiveView
from gpu_platform.ports.outbound.metrics import SchedulerMetrics

__all__ = ["Scheduling", "request_of"]

log = structlog.get_logger(LOG_NAME)

_NO_SCORE = Score(0, 0, 0, 0.0, 0, False)  # a running job's tasks: placed long ago

BindAll = Callable[[Mapping[str, Job], Mapping[str, GangPlacement], frozenset[str] | set[str]], int]
BindAndLaunch = Callable[..., None]  # (job, placement, *, borrowing)


class Scheduling:
    """The scheduling cycle. `live_view` is the plane's placement view (kept in step with the
    state); `effective_quotas` the admin's; `bind_all` and `bind_and_launch` are launching's."""

    def __init__(
        self,
        shared: Shared,
        *,
        live_view: LiveView,
        metrics: SchedulerMetrics,
        policy: SchedulerPolicy,
        effective_quotas: Callable[[], dict[str, Quota]],
        bind_all: BindAll,
        bind_and_launch: BindAndLaunch,
    ) -> None:
        self._s = shared
        self._live_view = live_view
        self._metrics = metrics
        self._policy = policy
        self._effective_quotas = effective_quotas
        self._bind_all = bind_all
        self._bind_and_launch = bind_and_launch
        self._running_tasks: dict[tuple[str, int], tuple[TaskPlacement, ...]] = {}
        self._why: dict[str, PendingReason] = {}  # pending job -> why it waits (last cycle)
        # job id -> (the job, nominated, its entry) from the last cycle (`_pending_jobs`)
        self._entries: dict[str, tuple[Job, bool, PendingJob]] = {}
        self._asked: set[str] = set()  # jobs the engine was asked about this cycle

    def schedule_once(self) -> int:
        """One scheduling cycle; returns how many jobs were bound and launched.

        The queue policy (`domain.scheduling.decide`: FIFO or priority with aging, quotas with
        cohorts, DRF fair share, EASY backfill, gang-aware preemption — docs/scheduling.md)
        runs over an indexed view of the free GPUs kept in step with the state: each cycle
        re-indexes only the nodes that changed since the last (`LiveView`, docs/placement.md).
        Its binds are launched in its order (a gang whole), its victims are stopped
        gracefully (SIGTERM, grace, SIGKILL) and re-queued, and every job left waiting keeps
        the reason the cycle gave. The cluster state re-validates every bind, so the view can
        only make us miss a slot, never oversubscribe.
        """
        launched = 0
        with self._s.lock:
            now = self._s.now()
            self._cancel_broken_dependencies(now)
            # replicated: only nodes whose agent can launch now
            live = self._s.hub.ready_nodes() if self._s.hub is not None else None
            view = self._live_view.sync(self._s.state, live)  # re-indexes changed nodes only
            queued = self._s.state.queued(now)
            open_jobs = self._s.state.open_jobs()
            holding = (j for j in open_jobs if j.holds_gpus)
            queued, throttled = hold_back_throttled(queued, holding)  # arrays' `%N`
            # a job waiting for a dependency binds nothing: left out of the decision, its
            # reason (DEPENDENCY) is given when asked (`why`); the decision is the same
            pending = self._pending_jobs(queued)
            running = self._running_jobs(open_jobs, now)
            quotas = self._effective_quotas()
            decision = decide(now, pending, running, view, quotas, self._policy, self._place)
            why = dict(decision.pending_reasons)
            why.update(throttled)
            self._report_refusals(why)
            for job in open_jobs:
                if job.state is not JobState.QUEUED:
                    continue
                if job.releasing:
                    why[job.id] = PendingReason(
                        PendingCode.PREEMPTION, "its previous attempt is still being stopped"
                    )
                elif job.not_before > now:
                    wait = job.not_before - now
                    why[job.id] = PendingReason(
                        PendingCode.BACKOFF, f"retry backoff after a fault: {wait:.0f}s left"
                    )
            for preemption in decision.preemptions:
                victim = self._s.state.job(preemption.victim)
                if victim.allocation is None or victim.releasing or not victim.holds_gpus:
                    continue
                self._s.nominated.add(preemption.preemptor)
                reason = f"preempted: {preemption.cause} (for job {preemption.preemptor})"
                self._s.execute(RequeueJob(victim.id, victim.allocation.epoch, now, reason))
            by_id = {j.id: j for j in queued}
            if self._s.replication is not None:  # one commit round for the cycle's binds
                launched = self._bind_all(by_id, decision.binds, decision.borrowing)
            for job_id, placement in decision.binds.items():
                if self._s.stopping.is_set() or self._s.replication is not None:
                    break
                self._s.nominated.discard(job_id)
                borrowing = job_id in decision.borrowing
                try:
                    self._bind_and_launch(by_id[job_id], placement, borrowing=borrowing)
                except Conflict as exc:  # the state re-validated the bind and refused it
                    log.info("bind refused", job_id=job_id, error=str(exc))
                    continue
                launched += 1
            self._why = why
            self._s.nominated &= {j.id for j in self._s.state.queued()}
        return launched

    def _running_jobs(self, jobs: list[Job], now: float) -> list[RunningJob]:
        """The jobs holding GPUs as the scheduler sees them; their task placements are built
        once per attempt (only progress changes from cycle to cycle)."""
        tasks = {}
        running = []
        for job in jobs:
            if not job.holds_gpus:
                continue
            assert job.allocation is not None
            key = (job.id, job.allocation.epoch)
            tasks[key] = self._running_tasks.get(key) or self._task_placements(job)
            running.append(self._running_job(job, now, tasks[key]))
        self._running_tasks = tasks
        return running

    def _report_refusals(self, why: Mapping[str, PendingReason]) -> None:
        """Jobs the cycle found no room for without asking the engine count as placement
        failures too (one per job per cycle, like the engine's own)."""
        for job_id in sorted(why.keys() - self._asked):
            reason = why[job_id]
            if reason.code is PendingCode.CAPACITY:
                failure = Unschedulable(reason.message, (("free gpus", 1),))
            elif reason.code is PendingCode.TOPOLOGY:
                failure = Unschedulable(reason.message, (("topology", 1),))
            else:
                continue
            self._metrics.placement_refused(job_id, failure)
        self._asked.clear()

    def why(self, job_id: str) -> PendingReason | None:
        """Why a waiting job waits, as of the last scheduling cycle (None if it does not)."""
        with self._s.lock:
            job = self._s.state.job(job_id)
            if job.state is not JobState.QUEUED:
                return None
            reason = self._why.get(job_id)
            if reason is None and job.spec.depends_on:  # not in the decision: see the cycle
                waiting = unmet_dependencies(job.spec, self._state_of)
                reason = dependency_reason(waiting) if waiting else None
            return reason

    def wants_cycle(self, job: Job) -> bool:
        """Does a submitted `job` need a scheduling cycle? Not while it waits for a dependency
        that may still complete: the cycle after that dependency ends looks at it."""
        with self._s.lock:
            return not waits_for_dependency(job.spec, self._state_of)

    def _state_of(self, job_id: str) -> JobState:
        return self._s.state.job(job_id).state

    def _pending_jobs(self, queued: Iterable[Job]) -> list[PendingJob]:
        """The decision's entries for the queued jobs that wait on no dependency. A job's entry
        is kept from the last cycle while the job (an immutable value: a changed job is a new
        object) and its nomination are the same, so a deep queue costs a lookup per job, not
        a new entry; entries that read more than the job (its dependencies' states, the GPU
        models or memory sizes of the inventory) are made again every cycle."""
        state_of = self._state_of
        nominated = self._s.nominated
        last = self._entries
        kept: dict[str, tuple[Job, bool, PendingJob]] = {}
        out: list[PendingJob] = []
        for job in queued:
            spec = job.spec
            if spec.depends_on and unmet_dependencies(spec, state_of):
                continue
            chosen = job.id in nominated
            hit = last.get(job.id)
            if hit is not None and hit[0] is job and hit[1] == chosen:
                entry = hit[2]
            else:
                entry = self._pending_job(job)
            if not (spec.depends_on or spec.mig_profile or spec.gpu_memory_bytes is not None):
                kept[job.id] = (job, chosen, entry)
            out.append(entry)
        self._entries = kept
        return out

    def _pending_job(self, job: Job) -> PendingJob:
        spec = job.spec
        waiting = unmet_dependencies(spec, self._state_of)
        request = request_of(spec)
        if request.fractional and spec.gpu_memory_bytes is not None:  # memory as a fraction
            classes = self._live_view.view.classes  # GPU memory sizes: a few hardware classes
            sizes = sorted({g.memory_bytes for hw in classes for g in hw.gpus})
            request = replace(request, gpu_milli=placement_milli(spec, sizes))
        if spec.mig_profile is not None:  # only GPU models whose MIG table has the profile
            models = {g.model for n in self._s.state.nodes for g in n.gpus}
            hosts = models_hosting(spec.mig_profile, request.models or models)
            # none left (the inventory changed since submit): a model no GPU has, so it waits
            request = replace(request, models=hosts or frozenset({"(no MIG host)"}))
        return PendingJob(
            id=job.id,
            tenant=spec.tenant,
            request=request,
            submitted_at=job.submitted_at,
            seq=job.seq,
            priority=spec.priority,
            preemptible=spec.preemptible,
            runtime_estimate_s=spec.time_limit_s,
            waiting_on=waiting,
            nominated=job.id in self._s.nominated,
        )

    def _task_placements(self, job: Job) -> tuple[TaskPlacement, ...]:
        assert job.allocation is not None
        tasks = []
        for slot in job.allocation.tasks:
            node = self._s.state.node(slot.node)
            milli = job.spec.gpu_milli  # < 1000: a share of one GPU
            shares = tuple(GpuShare(node.gpu(i), milli) for i in slot.gpu_indices)
            tasks.append(TaskPlacement(slot.node, shares, slot.numa_nodes, (), _NO_SCORE))
        return tuple(tasks)

    def _running_job(self, job: Job, now: float, tasks: tuple[TaskPlacement, ...]) -> RunningJob:
        limit = job.spec.time_limit_s
        started = job.started_at if job.started_at is not None else now
        return RunningJob(
            id=job.id,
            tenant=job.spec.tenant,
            tasks=tasks,
            started_at=started,
            priority=job.spec.priority,
            preemptible=job.spec.preemptible,
            borrowing=job.borrowing,
            cpu_milli=job.spec.cpu_milli,
            gpu_memory_bytes=quota_gpu_memory(job.spec),
            progress=min(1.0, (now - started) / limit) if limit else 0.0,
            expected_end=started + limit if limit else None,
            terminating=job.releasing,
            submitted_at=job.submitted_at,
            spread=job.spec.spread,
        )

    def _cancel_broken_dependencies(self, now: float) -> None:
        """A job whose dependency ended without completing can never start: cancel it
        (Slurm's afterok with kill_invalid_depend)."""
        for job in self._s.state.queued():
            for dep in job.spec.depends_on:
                state = self._s.state.job(dep).state
                if state in BROKEN:
                    self._s.execute(CancelJob(job.id, now, f"dependency {dep} ended {state}"))
                    break

    def _place(
        self, job_id: str, request: GpuRequest, view: ClusterView
    ) -> GangPlacement | Unschedulable:
        """The engine's decision for `job_id`, timed and reported to the scheduler metrics."""
        self._asked.add(job_id)
        started = time.perf_counter_ns()
        result = place(request, view)
        latency_us = (time.perf_counter_ns() - started) / 1000
        failure = result if isinstance(result, Unschedulable) else None
        self._metrics.placement_decided(job_id, latency_us, failure)
        return result


def request_of(spec: JobSpec) -> GpuRequest:
    """The placement request of a job: its shape (a share of one GPU below 1000 milli-GPU,
    CPU milli-cores, GPU memory) and its placement wishes (models, vendor: MPS is NVIDIA's)."""
    vendor = spec.vendor or ("nvidia" if spec.sharing == "mps" else None)
    return GpuRequest(
        gpus=spec.gpus,
        gpu_milli=spec.gpu_milli if spec.gpus else 1000,
        gpu_memory_bytes=spec.gpu_memory_bytes or 0,
        cpu_milli=spec.cpu_milli,
        vendors=frozenset({vendor}) if vendor else frozenset(),
        tasks=spec.tasks,
        models=frozenset(spec.gpu_models),
        nvlink=Affinity(spec.nvlink),
        numa=Affinity(spec.numa),
        same_rack=Affinity(spec.same_rack),
        spread=spec.spread,
    )
