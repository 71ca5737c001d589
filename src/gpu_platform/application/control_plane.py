"""The single-node control plane: serializes commands, persists jobs, runs the scheduler loop.

Every change is a domain command applied to `ClusterState` under one lock, then the changed
jobs are saved to the JobStore before the call returns (nothing acknowledged is lost), then the
events are published. Launching holds the same lock, so an attempt's exit report can never be
applied before its start.

A stopped attempt (cancel, requeue, abort) keeps its GPUs until the runner reports its process
ended; if the runner does not know the attempt, nothing is running and the GPUs are freed at once.

Child-process policy (documented in docs/operations.md): on graceful shutdown every running
attempt is first recorded as requeued (or failed, per `shutdown_policy`), then stopped with
SIGTERM, a grace period and SIGKILL of its process group. On start-up, attempts that held GPUs
belonged to a previous incarnation: their leftover processes are reaped, running jobs are
requeued and the GPUs freed.

Faults (docs/faults.md): health monitors call `report_health` from their own threads; each
finding becomes a cluster-state command, so the fault tables decide and the same lock orders
it with everything else. GPU and node state changes are saved to the HardwareStore before the
jobs they affect, and survive a restart. A GPU that reaches RESETTING is reset by the GpuReset
port once no attempt holds it (on a worker thread when `reset_in_background`), and the outcome
is fed back. Operator actions (`gpu_action`, `node_action`, `inject`) are audited, refused ones
too.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import structlog

from gpu_platform.domain.allocation.mig_jobs import models_hosting
from gpu_platform.domain.cluster_state import (
    AbortJob,
    BindJob,
    CancelJob,
    ClusterState,
    Command,
    FinishJob,
    RequeueJob,
    StartJob,
    SubmitJob,
)
from gpu_platform.domain.errors import (
    Conflict,
    DomainError,
    IllegalTransition,
    InvalidRequest,
    NotFound,
)
from gpu_platform.domain.events import (
    DomainEvent,
    GpuStateChanged,
    JobAborted,
    JobBound,
    JobCancelled,
    JobEvent,
    JobRequeued,
    NodeStateChanged,
    StaleReportIgnored,
)
from gpu_platform.domain.faults.commands import (
    AdminAction,
    CheckNodes,
    CompleteGpuReset,
    HardwareRecord,
    NodeHeartbeat,
    ReportEcc,
    ReportGpuLost,
    ReportThermal,
    ReportXid,
    SetGpuAdmin,
    SetNodeAdmin,
)
from gpu_platform.domain.faults.health import (
    EccReading,
    GpuLostReport,
    HealthEvent,
    Heartbeat,
    ThermalReading,
    XidReport,
)
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.model.audit import AuditRecord
from gpu_platform.domain.model.job import Job, JobSpec, JobState
from gpu_platform.domain.model.node import Inventory, Node
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
from gpu_platform.domain.topology.matrix import TopologyMatrix, build_matrix
from gpu_platform.ports.inbound.admin_service import NodeInfo
from gpu_platform.ports.inbound.job_service import ClusterStatus, GpuInfo
from gpu_platform.ports.outbound.clock import Clock, IdGenerator
from gpu_platform.ports.outbound.events import EventPublisher
from gpu_platform.ports.outbound.gpu_reset import GpuReset, GpuResetError
from gpu_platform.ports.outbound.hardware_store import HardwareStore
from gpu_platform.ports.outbound.health_monitor import FaultInjector
from gpu_platform.ports.outbound.job_runner import (
    ExitReport,
    GangEnv,
    JobRunner,
    LaunchError,
    LaunchSpec,
)
from gpu_platform.ports.outbound.job_store import JobStore
from gpu_platform.ports.outbound.metrics import NoSchedulerMetrics, SchedulerMetrics
from gpu_platform.ports.outbound.quota_store import QuotaStore

__all__ = ["ControlPlane", "ShutdownPolicy"]

log = structlog.get_logger(__name__)

ShutdownPolicy = Literal["requeue", "fail"]


_NO_SCORE = Score(0, 0, 0, 0.0, 0, False)  # a running job's tasks: placed long ago


@dataclass
class _Run:
    """The tasks of one attempt still running, and why the attempt is ending (the first task
    that failed, or a launch error). The job's exit is recorded once every task has ended: a
    gang fails whole, and its GPUs stay held until its last process is gone."""

    tasks: int
    live: set[int] = field(default_factory=set)
    failure: ExitReport | None = None
    launch_error: str = ""


class ControlPlane:
    """Implements the JobService and AdminService inbound ports on one node.

    Optional collaborators: `hardware` persists GPU/node states and the audit log (without it
    they live in memory only); `gpu_reset` resets GPUs (without it a GPU needing a reset goes
    OFFLINE: nothing can reset it); `injector` enables `inject`; `check_heartbeats` makes each
    scheduling cycle judge node heartbeat ages (only useful when a monitor sends heartbeats);
    `scheduler_metrics` hears every placement decision (latency, outcome).
    """

    def __init__(
        self,
        inventory: Inventory,
        store: JobStore,
        runner: JobRunner,
        clock: Clock,
        ids: IdGenerator,
        publisher: EventPublisher,
        *,
        stop_grace_s: float = 10.0,
        shutdown_policy: ShutdownPolicy = "requeue",
        schedule_interval_s: float = 1.0,
        pin_cpus: bool = False,
        hardware: HardwareStore | None = None,
        gpu_reset: GpuReset | None = None,
        injector: FaultInjector | None = None,
        fault_policy: FaultPolicy = FaultPolicy(),
        check_heartbeats: bool = False,
        reset_in_background: bool = False,
        scheduler_metrics: SchedulerMetrics | None = None,
        scheduler_policy: SchedulerPolicy = SchedulerPolicy(),
        quotas: Mapping[str, Quota] | None = None,
        quota_store: QuotaStore | None = None,
    ) -> None:
        self._inventory = inventory
        self._store = store
        self._runner = runner
        self._clock = clock
        self._ids = ids
        self._publisher = publisher
        self._grace = stop_grace_s
        self._shutdown_policy = shutdown_policy
        self._interval = schedule_interval_s
        self._pin = pin_cpus
        self._matrices: dict[str, TopologyMatrix] = {}
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._hardware = hardware
        self._gpu_reset = gpu_reset
        self._injector = injector
        self._check_heartbeats = check_heartbeats
        self._reset_in_background = reset_in_background
        self._resets_inflight: set[str] = set()
        self._runs: dict[tuple[str, int], _Run] = {}  # (job, epoch) -> its running tasks
        self._memory_audit: list[AuditRecord] = []
        self._metrics = scheduler_metrics or NoSchedulerMetrics()
        self._policy = scheduler_policy
        self._quota_store = quota_store
        self._quotas = dict(quotas or {})  # configured; stored ones (set at run time) win
        if quota_store is not None:
            self._quotas.update(quota_store.load_quotas())
        self._why: dict[str, PendingReason] = {}  # pending job -> why it waits (last cycle)
        self._nominated: set[str] = set()  # preemptors waiting for their victims to stop
        self._asked: set[str] = set()  # jobs the engine was asked about this cycle
        self._state = ClusterState(
            inventory,
            store.load(),
            hardware=hardware.load_hardware() if hardware is not None else (),
            policy=fault_policy,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def recover(self) -> list[str]:
        """Requeue attempts left by a previous incarnation (reaping their processes)."""
        recovered = []
        with self._lock:
            for job in self._state.jobs():
                if not (job.holds_gpus and job.allocation is not None):
                    continue
                epoch = job.allocation.epoch
                killed = self._runner.reap(job.id, epoch)
                reason = f"attempt {job.attempt} lost: control plane restarted"
                if killed:
                    reason += f" ({killed} leftover processes killed)"
                if job.releasing:  # it was being stopped; its process is gone now
                    self._execute(FinishJob(job.id, epoch, None, self._now(), reason))
                else:  # the runner does not know it, so the GPUs are freed at once
                    self._execute(RequeueJob(job.id, epoch, self._now(), reason))
                    recovered.append(job.id)
        if recovered:
            log.warning("recovered lost attempts", jobs=recovered)
        self._start_due_resets()  # GPUs that were RESETTING when we stopped
        return recovered

    def start(self) -> None:
        """Recover, then run the scheduler loop on a dedicated thread (it also launches jobs)."""
        self.recover()
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Record running attempts per the shutdown policy, stop them, stop the loop."""
        with self._lock:
            self._stopping.set()
            for job in self._state.jobs():
                if not (job.holds_gpus and job.allocation is not None):
                    continue
                epoch, now = job.allocation.epoch, self._now()
                if job.releasing:
                    continue
                if self._shutdown_policy == "requeue":
                    self._execute(RequeueJob(job.id, epoch, now, "control plane shut down"))
                else:
                    self._execute(AbortJob(job.id, epoch, now, "control plane shut down"))
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._runner.stop_all(self._grace)

    # -- JobService --------------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> Job:
        if self._stopping.is_set():
            raise InvalidRequest("server", "shutting down")
        job_id = self._ids.new_job_id()
        with self._lock:
            self._execute(SubmitJob(job_id, spec, self._now()))
            job = self._state.job(job_id)
        self._wake.set()
        return job

    def get(self, job_id: str) -> Job:
        with self._lock:
            return self._state.job(job_id)

    def list_jobs(self, state: str | None = None) -> list[Job]:
        if state is not None and state.upper() not in JobState.__members__:
            raise InvalidRequest("state", f"unknown job state {state!r}")
        with self._lock:
            jobs = list(self._state.jobs())
        return [j for j in jobs if state is None or j.state == state.upper()]

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> Job:
        with self._lock:
            self._execute(CancelJob(job_id, self._now(), reason))
            job = self._state.job(job_id)
        self._wake.set()
        return job

    def kill(self, job_id: str, reason: str = "killed by user") -> Job:
        """`cancel` with a zero grace period: the attempt gets SIGKILL at once."""
        with self._lock:
            grace, self._grace = self._grace, 0.0
            try:
                return self.cancel(job_id, reason)
            finally:
                self._grace = grace

    def logs(
        self, job_id: str, attempt: int | None = None, tail_bytes: int = 65536, rank: int = 0
    ) -> str:
        job = self.get(job_id)
        _check_rank(job, rank)
        which = job.attempt if attempt is None else attempt
        if which < 1 or which > job.attempt:
            if attempt is None:
                return ""
            raise NotFound("attempt", f"{job_id}#{attempt}")
        return self._runner.read_log(job_id, which, tail_bytes, rank)

    def log_from(
        self, job_id: str, attempt: int, offset: int, max_bytes: int = 65536, rank: int = 0
    ) -> tuple[bytes, bool]:
        job = self.get(job_id)
        _check_rank(job, rank)
        if attempt < 1 or attempt > job.attempt:
            raise NotFound("attempt", f"{job_id}#{attempt}")
        live = job.attempt == attempt and job.holds_gpus
        return self._runner.read_log_from(job_id, attempt, offset, max_bytes, rank), live

    def gpus(self) -> list[GpuInfo]:
        with self._lock:
            return [
                GpuInfo(
                    g,
                    self._state.gpu_state(g),
                    self._state.holder(g),
                    self._state.reason(g.uuid),
                    self._state.hot(g),
                )
                for n in self._state.nodes
                for g in n.gpus
            ]

    def status(self) -> ClusterStatus:
        with self._lock:
            jobs = Counter(str(j.state) for j in self._state.jobs())
            free = sum(len(v.free) for v in self._state.node_views())
        return ClusterStatus(
            inventory_source=self._inventory.source,
            simulated=self._inventory.simulated,
            nodes=len(self._inventory.nodes),
            gpus_total=self._inventory.gpu_count,
            gpus_free=free,
            jobs_by_state=dict(jobs),
            notes=self._inventory.notes,
        )

    # -- scheduling ----------------------------------------------------------------------------

    def schedule_once(self) -> int:
        """One scheduling cycle; returns how many jobs were bound and launched.

        The queue policy (`domain.scheduling.decide`: FIFO or priority with aging, quotas with
        cohorts, DRF fair share, EASY backfill, gang-aware preemption — docs/scheduling.md)
        runs over an indexed view of the free GPUs built once per cycle (docs/placement.md).
        Its binds are launched in its order (a gang whole), its victims are stopped
        gracefully (SIGTERM, grace, SIGKILL) and re-queued, and every job left waiting keeps
        the reason the cycle gave. The cluster state re-validates every bind, so the view can
        only make us miss a slot, never oversubscribe.
        """
        launched = 0
        with self._lock:
            now = self._now()
            self._cancel_broken_dependencies(now)
            free = {v.name: [g.index for g in v.free] for v in self._state.node_views()}
            ready = [n for n in self._state.nodes if n.name in free]  # READY nodes only
            view = ClusterView.from_free(ready, free)
            queued = self._state.queued(now)
            pending = [self._pending_job(j) for j in queued]
            running = [self._running_job(j, now) for j in self._state.jobs() if j.holds_gpus]
            decision = decide(now, pending, running, view, self._quotas, self._policy, self._place)
            why = dict(decision.pending_reasons)
            self._report_refusals(why)
            for job in self._state.jobs():
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
                victim = self._state.job(preemption.victim)
                if victim.allocation is None or victim.releasing or not victim.holds_gpus:
                    continue
                self._nominated.add(preemption.preemptor)
                reason = f"preempted: {preemption.cause} (for job {preemption.preemptor})"
                self._execute(RequeueJob(victim.id, victim.allocation.epoch, now, reason))
            by_id = {j.id: j for j in queued}
            for job_id, placement in decision.binds.items():
                if self._stopping.is_set():
                    break
                self._nominated.discard(job_id)
                borrowing = job_id in decision.borrowing
                self._bind_and_launch(by_id[job_id], placement, borrowing=borrowing)
                launched += 1
            self._why = why
            self._nominated &= {j.id for j in self._state.queued()}
        return launched

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
        with self._lock:
            job = self._state.job(job_id)
            return self._why.get(job_id) if job.state is JobState.QUEUED else None

    def quotas(self) -> dict[str, Quota]:
        with self._lock:
            return dict(self._quotas)

    def set_quota(self, tenant: str, quota: Quota | None) -> None:
        """Set (or with None remove) a tenant's quota; stored, effective next cycle."""
        with self._lock:
            if self._quota_store is not None:
                self._quota_store.save_quota(tenant, quota)
            if quota is None:
                self._quotas.pop(tenant, None)
            else:
                self._quotas[tenant] = quota
        self._wake.set()

    def _pending_job(self, job: Job) -> PendingJob:
        spec = job.spec
        waiting = frozenset(
            d for d in spec.depends_on if self._state.job(d).state is not JobState.COMPLETED
        )
        request = request_of(spec)
        if spec.mig_profile is not None:  # only GPU models whose MIG table has the profile
            models = {g.model for n in self._state.nodes for g in n.gpus}
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
            nominated=job.id in self._nominated,
        )

    def _running_job(self, job: Job, now: float) -> RunningJob:
        assert job.allocation is not None
        tasks = []
        for slot in job.allocation.tasks:
            node = self._state.node(slot.node)
            shares = tuple(GpuShare(node.gpu(i), 1000) for i in slot.gpu_indices)
            tasks.append(TaskPlacement(slot.node, shares, slot.numa_nodes, (), _NO_SCORE))
        limit = job.spec.time_limit_s
        started = job.started_at if job.started_at is not None else now
        return RunningJob(
            id=job.id,
            tenant=job.spec.tenant,
            tasks=tuple(tasks),
            started_at=started,
            priority=job.spec.priority,
            preemptible=job.spec.preemptible,
            borrowing=job.borrowing,
            progress=min(1.0, (now - started) / limit) if limit else 0.0,
            expected_end=started + limit if limit else None,
            terminating=job.releasing,
            submitted_at=job.submitted_at,
        )

    def _cancel_broken_dependencies(self, now: float) -> None:
        """A job whose dependency ended without completing can never start: cancel it
        (Slurm's afterok with kill_invalid_depend)."""
        for job in self._state.queued():
            for dep in job.spec.depends_on:
                state = self._state.job(dep).state
                if state in (JobState.FAILED, JobState.CANCELLED):
                    self._execute(CancelJob(job.id, now, f"dependency {dep} ended {state}"))
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

    def _bind_and_launch(self, job: Job, placed: GangPlacement, *, borrowing: bool = False) -> None:
        slots = [(t.node, tuple(s.gpu.index for s in t.gpus)) for t in placed.tasks]
        (node, indices), peers = slots[0], tuple(slots[1:])
        bind = BindJob(job.id, node, indices, self._now(), peers=peers, borrowing=borrowing)
        events = self._execute(bind)
        bound = next(e for e in events if isinstance(e, JobBound))
        alloc = bound.allocation
        vendors = [str(s.gpu.vendor) for t in placed.tasks for s in t.gpus]
        run = self._runs[(job.id, alloc.epoch)] = _Run(len(alloc.tasks))
        for rank, spec in enumerate(self._task_specs(job, bound, vendors[0] if vendors else "")):
            try:
                self._runner.start(spec, self._on_exit)
            except LaunchError as exc:
                run.launch_error = f"launch failed: {exc}"
                break
            run.live.add(rank)
        if not run.launch_error:
            self._execute(StartJob(job.id, alloc.epoch, self._now()))
        elif not run.live or not self._runner.stop(job.id, alloc.epoch, self._grace):
            del self._runs[(job.id, alloc.epoch)]
            self._execute(FinishJob(job.id, alloc.epoch, None, self._now(), run.launch_error))

    def _task_specs(self, job: Job, bound: JobBound, vendor: str) -> list[LaunchSpec]:
        """One LaunchSpec per task, rank order. A gang's tasks get torchrun's rendezvous: rank
        0's node is the master (its `address` label, else loopback: in single-server mode the
        in-process runner starts every task on this host)."""
        alloc = bound.allocation
        tasks = alloc.tasks
        node_order = list(alloc.nodes)
        master = dict(self._state.node(tasks[0].node).labels).get("address", "127.0.0.1")
        specs = []
        for rank, slot in enumerate(tasks):
            node = self._state.node(slot.node)
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
                )
            specs.append(
                LaunchSpec(
                    job_id=job.id,
                    epoch=alloc.epoch,
                    attempt=bound.attempt,
                    argv=job.spec.command,
                    env=job.spec.env,
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
                    mig_profile=job.spec.mig_profile,
                )
            )
        return specs

    def _nearest_nics(self, node: Node, gpus: tuple[int, ...]) -> tuple[str, ...]:
        """RDMA NICs closest to the job's GPUs (NCCL's choice), in GPU order, no repeats."""
        if node.topology is None or not gpus:
            return ()
        matrix = self._matrices.get(node.name)
        if matrix is None:
            rdma = [n.name for n in node.topology.nics if n.kind == "rdma"]
            matrix = self._matrices[node.name] = build_matrix(node.topology, rdma)
        out: list[str] = []
        for gpu in gpus:
            if gpu in matrix.gpus:
                out += [n for n in matrix.nearest_nics(gpu) if n not in out]
        return tuple(out)

    def _on_exit(self, report: ExitReport) -> None:
        """A task ended. The attempt's exit is recorded when its last task has ended: with the
        first failing task's code and reason (the rest of a gang is stopped at once)."""
        with self._lock:
            key = (report.job_id, report.epoch)
            run = self._runs.get(key)
            if run is None:  # not started by this incarnation's bookkeeping: report it as is
                self._execute(FinishJob(*key, report.exit_code, self._now(), report.reason))
                self._wake.set()
                return
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
                    self._runner.stop(report.job_id, report.epoch, self._grace)
            if run.live:
                return
            del self._runs[key]
            code, reason = report.exit_code, report.reason
            if run.launch_error:
                code, reason = None, run.launch_error
            elif run.failure is not None:
                code, reason = run.failure.exit_code, run.failure.reason
                if run.tasks > 1:
                    reason = f"task {run.failure.rank} {reason}; the gang was stopped whole"
            self._execute(FinishJob(*key, code, self._now(), reason))
        self._wake.set()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                if self._check_heartbeats:
                    self.check_nodes()
                self.schedule_once()
            except Exception:  # a bug must not kill the loop silently
                log.exception("scheduling cycle failed")
            self._wake.wait(self._interval)
            self._wake.clear()

    # -- plumbing ------------------------------------------------------------------------------

    def _execute(self, command: Command) -> list[DomainEvent]:
        """Apply, persist changed hardware then jobs, then publish and carry out effects."""
        with self._lock:
            events = self._state.apply(command)
            self._save_hardware(events)
            changed = {
                e.job_id
                for e in events
                if isinstance(e, JobEvent) and not isinstance(e, StaleReportIgnored)
            }
            self._store.save([self._state.job(j) for j in sorted(changed)])
            for event in events:
                self._publisher.publish(event)
            for event in events:
                if not isinstance(event, JobEvent):
                    continue
                stop = (
                    event.stop
                    if isinstance(event, JobCancelled | JobRequeued | JobAborted)
                    else None
                )
                if stop is not None and not self._runner.stop(
                    event.job_id, stop.epoch, self._grace
                ):
                    self._runs.pop((event.job_id, stop.epoch), None)
                    why = "attempt was not running"
                    self._execute(FinishJob(event.job_id, stop.epoch, None, self._now(), why))
            self._start_due_resets()
            return events

    def _save_hardware(self, events: list[DomainEvent]) -> None:
        if self._hardware is None:
            return
        now = self._now()
        records = []
        for e in events:
            if isinstance(e, GpuStateChanged):
                records.append(HardwareRecord("gpu", e.uuid, str(e.new), e.reason, now))
            elif isinstance(e, NodeStateChanged):
                records.append(HardwareRecord("node", e.node, str(e.new), e.reason, now))
        if records:
            self._hardware.save_hardware(records)

    def _now(self) -> float:
        return self._clock.now()

    # -- health and resets ---------------------------------------------------------------------

    def report_health(self, event: HealthEvent) -> None:
        """A monitor's finding (called from its thread). Never raises: a finding about an
        unknown GPU or node is logged and dropped."""
        if self._stopping.is_set():
            return
        now = self._now()
        command: Command
        match event:
            case XidReport(node, index, xid):
                command = ReportXid(node, index, xid, now)
            case EccReading(node, index, corrected, uncorrected, pending, failed):
                command = ReportEcc(node, index, corrected, uncorrected, pending, failed, now)
            case ThermalReading(node, index, temperature, reasons):
                command = ReportThermal(node, index, temperature, reasons, now)
            case GpuLostReport(node, index, detail):
                command = ReportGpuLost(node, index, now, detail)
            case Heartbeat(node):
                command = NodeHeartbeat(node, now)
        try:
            events = self._execute(command)
        except DomainError as exc:
            log.warning("health finding dropped", finding=repr(event), error=str(exc))
            return
        if events:  # most readings change nothing; only a change can free or block GPUs
            self._wake.set()

    def check_nodes(self) -> None:
        """Judge node heartbeat ages now (SUSPECT / DOWN per the fault policy)."""
        with self._lock:
            self._execute(CheckNodes(self._now()))
        self._wake.set()

    def _start_due_resets(self) -> None:
        with self._lock:
            due = [g for g in self._state.resets_due() if g.uuid not in self._resets_inflight]
            for gpu in due:
                self._resets_inflight.add(gpu.uuid)
        for gpu in due:
            args = (gpu.node, gpu.index, gpu.uuid)
            if self._reset_in_background:
                threading.Thread(target=self._reset, args=args, name="gpu-reset").start()
            else:
                self._reset(*args)

    def _reset(self, node: str, index: int, uuid: str) -> None:
        ok, detail = True, ""
        try:
            if self._gpu_reset is None:
                raise GpuResetError("no GPU reset controller is configured")
            self._gpu_reset.reset(node, index)
        except GpuResetError as exc:
            ok, detail = False, str(exc)
        except Exception as exc:  # an adapter bug must not leave the GPU RESETTING forever
            log.exception("gpu reset crashed", node=node, gpu=index)
            ok, detail = False, f"reset crashed: {exc}"
        with self._lock:
            self._resets_inflight.discard(uuid)
            if self._stopping.is_set():  # stores may be closing; the GPU is reset after restart
                log.warning("gpu reset outcome dropped at shutdown", node=node, gpu=index, ok=ok)
                return
            try:
                self._execute(CompleteGpuReset(node, index, ok, self._now(), detail))
            except DomainError as exc:  # an operator moved it meanwhile (offline, online)
                log.warning("gpu reset outcome dropped", node=node, gpu=index, error=str(exc))
        self._wake.set()

    # -- AdminService ----------------------------------------------------------------------------

    def gpu_action(
        self,
        node: str,
        gpu_index: int,
        action: AdminAction,
        *,
        reason: str,
        actor: str,
        force: bool = False,
    ) -> None:
        verb = f"{action} --force" if force else action
        why = f"{verb} by {actor}: {reason}" if reason else f"{verb} by {actor}"
        command = SetGpuAdmin(node, gpu_index, action, why, self._now(), force)
        self._admin(command, actor, verb, f"gpu {node}:{gpu_index}", reason)

    def node_action(
        self, node: str, action: AdminAction, *, reason: str, actor: str, force: bool = False
    ) -> None:
        verb = f"{action} --force" if force else action
        why = f"{verb} by {actor}: {reason}" if reason else f"{verb} by {actor}"
        command = SetNodeAdmin(node, action, why, self._now(), force)
        self._admin(command, actor, verb, f"node {node}", reason)

    def _admin(self, command: Command, actor: str, verb: str, target: str, reason: str) -> None:
        with self._lock:
            try:
                self._execute(command)
            except IllegalTransition as exc:
                self._record(actor, verb, target, reason, f"refused: {exc}")
                raise Conflict(str(exc)) from None
            except DomainError as exc:
                self._record(actor, verb, target, reason, f"refused: {exc}")
                raise
            self._record(actor, verb, target, reason, "ok")
        self._wake.set()

    def inject(self, script: str, *, actor: str) -> list[str]:
        if self._injector is None:
            self._record(actor, "inject", "debug", script, "refused: injection disabled")
            raise InvalidRequest("script", "fault injection is disabled on this server")
        try:
            lines = self._injector.inject(script)
        except ValueError as exc:
            self._record(actor, "inject", "debug", script, f"refused: {exc}")
            raise InvalidRequest("script", str(exc)) from None
        self._record(actor, "inject", "debug", "; ".join(lines), "ok")
        return lines

    def nodes(self) -> list[NodeInfo]:
        with self._lock:
            jobs = Counter(
                j.allocation.node
                for j in self._state.jobs()
                if j.holds_gpus and j.allocation is not None
            )
            return [
                NodeInfo(n.name, n.state, self._state.reason(n.name), len(n.gpus), jobs[n.name])
                for n in self._state.nodes
            ]

    def audit(self, limit: int = 100) -> list[AuditRecord]:
        if self._hardware is not None:
            return self._hardware.audit(limit)
        with self._lock:
            return self._memory_audit[-limit:]

    def _record(self, actor: str, action: str, target: str, reason: str, outcome: str) -> None:
        record = AuditRecord(self._now(), actor, action, target, reason, outcome)
        log.info("audit", **{k: getattr(record, k) for k in record.__slots__})
        if self._hardware is not None:
            self._hardware.append_audit(record)
        else:
            with self._lock:
                self._memory_audit.append(record)

    def check_invariants(self) -> None:
        with self._lock:
            self._state.check_invariants()


def _check_rank(job: Job, rank: int) -> None:
    if not 0 <= rank < job.spec.tasks:
        raise InvalidRequest("rank", f"job {job.id} has tasks 0..{job.spec.tasks - 1}, not {rank}")


def request_of(spec: JobSpec) -> GpuRequest:
    """The placement request of a job: its shape and its placement wishes."""
    return GpuRequest(
        gpus=spec.gpus,
        tasks=spec.tasks,
        models=frozenset(spec.gpu_models),
        nvlink=Affinity(spec.nvlink),
        numa=Affinity(spec.numa),
        same_rack=Affinity(spec.same_rack),
    )
