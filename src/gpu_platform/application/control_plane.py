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
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Literal

import structlog

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
from gpu_platform.domain.errors import InvalidRequest, NotFound
from gpu_platform.domain.events import (
    DomainEvent,
    JobAborted,
    JobBound,
    JobCancelled,
    JobRequeued,
    StaleReportIgnored,
)
from gpu_platform.domain.model.job import Job, JobSpec, JobState
from gpu_platform.domain.model.node import Inventory, Node
from gpu_platform.domain.placement.first_fit import (
    NodeView,
    Placement,
    PlacementRequest,
    first_fit,
)
from gpu_platform.domain.topology.matrix import TopologyMatrix, build_matrix
from gpu_platform.ports.inbound.job_service import ClusterStatus, GpuInfo
from gpu_platform.ports.outbound.clock import Clock, IdGenerator
from gpu_platform.ports.outbound.events import EventPublisher
from gpu_platform.ports.outbound.job_runner import ExitReport, JobRunner, LaunchError, LaunchSpec
from gpu_platform.ports.outbound.job_store import JobStore

__all__ = ["ControlPlane", "ShutdownPolicy"]

log = structlog.get_logger(__name__)

ShutdownPolicy = Literal["requeue", "fail"]


class ControlPlane:
    """Implements the JobService inbound port on one node."""

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
        self._state = ClusterState(inventory, store.load())

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

    def logs(self, job_id: str, attempt: int | None = None, tail_bytes: int = 65536) -> str:
        job = self.get(job_id)
        which = job.attempt if attempt is None else attempt
        if which < 1 or which > job.attempt:
            if attempt is None:
                return ""
            raise NotFound("attempt", f"{job_id}#{attempt}")
        return self._runner.read_log(job_id, which, tail_bytes)

    def log_from(
        self, job_id: str, attempt: int, offset: int, max_bytes: int = 65536
    ) -> tuple[bytes, bool]:
        job = self.get(job_id)
        if attempt < 1 or attempt > job.attempt:
            raise NotFound("attempt", f"{job_id}#{attempt}")
        live = job.attempt == attempt and job.holds_gpus
        return self._runner.read_log_from(job_id, attempt, offset, max_bytes), live

    def gpus(self) -> list[GpuInfo]:
        with self._lock:
            return [
                GpuInfo(g, self._state.gpu_state(g), self._state.holder(g))
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
        """One scheduling cycle: bind and launch queued jobs in FIFO order. Returns #launched.

        FIFO without skipping: when the head job does not fit, later jobs wait too (issue 5
        brings backfill), so a big job is never starved by a stream of small ones.
        """
        launched = 0
        with self._lock:
            views = self._state.node_views()  # one snapshot per cycle, narrowed as we bind
            for job in self._state.queued():
                if self._stopping.is_set():
                    break
                placed = first_fit(PlacementRequest(job.spec.gpus), views)
                if not isinstance(placed, Placement):
                    break
                self._bind_and_launch(job, placed)
                launched += 1
                taken = {g.uuid for g in placed.gpus}
                views = [
                    NodeView(v.name, tuple(g for g in v.free if g.uuid not in taken))
                    if v.name == placed.node
                    else v
                    for v in views
                ]
        return launched

    def _bind_and_launch(self, job: Job, placed: Placement) -> None:
        indices = tuple(g.index for g in placed.gpus)
        events = self._execute(BindJob(job.id, placed.node, indices, self._now()))
        bound = next(e for e in events if isinstance(e, JobBound))
        alloc = bound.allocation
        node = self._state.node(alloc.node)
        cpus: tuple[int, ...] = ()
        if self._pin and alloc.numa_nodes:
            local = {n.id: n.cpus for n in node.numa_nodes}
            cpus = tuple(sorted(c for numa in alloc.numa_nodes for c in local.get(numa, ())))
        nics = self._nearest_nics(node, alloc.gpu_indices)
        spec = LaunchSpec(
            job_id=job.id,
            epoch=alloc.epoch,
            attempt=bound.attempt,
            argv=job.spec.command,
            env=job.spec.env,
            gpu_indices=alloc.gpu_indices,
            gpu_uuids=alloc.gpu_uuids,
            cwd=job.spec.cwd,
            vendor=str(placed.gpus[0].vendor) if placed.gpus else "nvidia",
            cpus=cpus,
            mems=alloc.numa_nodes if cpus else (),
            memory_bytes=job.spec.memory_bytes,
            time_limit_s=job.spec.time_limit_s,
            user=job.spec.user,
            nics=nics,
        )
        try:
            self._runner.start(spec, self._on_exit)
        except LaunchError as exc:
            self._execute(
                FinishJob(job.id, alloc.epoch, None, self._now(), f"launch failed: {exc}")
            )
            return
        self._execute(StartJob(job.id, alloc.epoch, self._now()))

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
        with self._lock:
            self._execute(
                FinishJob(report.job_id, report.epoch, report.exit_code, self._now(), report.reason)
            )
        self._wake.set()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.schedule_once()
            except Exception:  # a bug must not kill the loop silently
                log.exception("scheduling cycle failed")
            self._wake.wait(self._interval)
            self._wake.clear()

    # -- plumbing ------------------------------------------------------------------------------

    def _execute(self, command: Command) -> list[DomainEvent]:
        """Apply, persist the changed jobs, then publish and carry out stop effects."""
        with self._lock:
            events = self._state.apply(command)
            changed = {e.job_id for e in events if not isinstance(e, StaleReportIgnored)}
            self._store.save([self._state.job(j) for j in sorted(changed)])
            for event in events:
                self._publisher.publish(event)
            for event in events:
                stop = (
                    event.stop
                    if isinstance(event, JobCancelled | JobRequeued | JobAborted)
                    else None
                )
                if stop is not None and not self._runner.stop(
                    event.job_id, stop.epoch, self._grace
                ):
                    why = "attempt was not running"
                    self._execute(FinishJob(event.job_id, stop.epoch, None, self._now(), why))
            return events

    def _now(self) -> float:
        return self._clock.now()

    def check_invariants(self) -> None:
        with self._lock:
            self._state.check_invariants()
