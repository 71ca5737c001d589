"""The single-node control plane: serializes commands, persists jobs, runs the scheduler loop.

Every change is a domain command applied to `ClusterState` under one lock, then the changed
jobs are saved to the JobStore before the call returns (nothing acknowledged is lost), then the
events are published. Launching holds the same lock, so an attempt's exit report can never be
applied before its start.

A stopped attempt (cancel, requeue, abort) keeps its GPUs until the runner reports its process
ended; if the runner does not know the attempt, nothing is running and the GPUs are freed at once.

GPU and node state changes are saved to the HardwareStore before the jobs they affect, and
survive a restart.

This module keeps submits and the scheduler loop. The other concerns are collaborators in
`application.control`, built on one `control.shared.Shared` (state, lock, command path):
`commands` (the command path: `execute`, replicated `commit_all`, `effects`),
`lifecycle` (recover, start, shutdown policy), `leadership` (replicated role, read barrier),
`agents` (hello, reconcile, heartbeats), `health` (findings, heartbeat verdicts, GPU resets),
`admin` (operator actions, quotas, audit), `membership` (Raft servers), `jobs` (reads,
cancel, kill, logs), `scheduling` (the scheduling cycle) and `launching` (binds, launches,
task exits). `ControlPlane` delegates its public methods to them; the methods that only
delegate are its mixins in `control.delegates`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import TypeVar

import structlog

from gpu_platform.application.agent_hub import AgentHub
from gpu_platform.application.consistency import LeaderElsewhere
from gpu_platform.application.control.admin import Admin
from gpu_platform.application.control.agents import Agents
from gpu_platform.application.control.commands import Commands
from gpu_platform.application.control.delegates import AdminMethods, AgentEndpoints, JobReads
from gpu_platform.application.control.health import Health
from gpu_platform.application.control.jobs import Jobs
from gpu_platform.application.control.launching import Launching
from gpu_platform.application.control.leadership import Leadership
from gpu_platform.application.control.lifecycle import Lifecycle, ShutdownPolicy
from gpu_platform.application.control.membership import Membership
from gpu_platform.application.control.rendezvous import DEFAULT_GANG_PORT_BASE
from gpu_platform.application.control.scheduling import Scheduling, request_of
from gpu_platform.application.control.shared import Run as _Run
from gpu_platform.application.control.shared import Shared
from gpu_platform.application.raft_node import RaftNodeError
from gpu_platform.application.replication import RaftReplication as Replication
from gpu_platform.domain.cluster_state import (
    ClusterState,
    Command,
    SubmitArray,
    SubmitJob,
)
from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.events import (
    DomainEvent,
)
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.model.job import Job, JobSpec, token_job_id
from gpu_platform.domain.model.job_array import ArraySpec, parse_array
from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.scheduling import (
    PendingReason,
    Quota,
    SchedulerPolicy,
)
from gpu_platform.domain.scheduling.live_view import LiveView
from gpu_platform.ports.inbound.job_service import ArrayInfo
from gpu_platform.ports.outbound.clock import Clock, IdGenerator
from gpu_platform.ports.outbound.events import EventPublisher
from gpu_platform.ports.outbound.gpu_reset import GpuReset
from gpu_platform.ports.outbound.hardware_store import HardwareStore
from gpu_platform.ports.outbound.health_monitor import FaultInjector
from gpu_platform.ports.outbound.job_runner import (
    ExitReport,
    JobRunner,
)
from gpu_platform.ports.outbound.job_store import JobStore
from gpu_platform.ports.outbound.metrics import NoSchedulerMetrics, SchedulerMetrics
from gpu_platform.ports.outbound.quota_store import QuotaStore
from gpu_platform.ports.outbound.trace_context import JobTraceContext, NoTraceContext

__all__ = ["ControlPlane", "ShutdownPolicy", "request_of"]

log = structlog.get_logger(__name__)
_T = TypeVar("_T")

_MIN_PAUSE_S = 0.002  # shorter scheduling cycles are followed by no pause


class ControlPlane(JobReads, AgentEndpoints, AdminMethods):
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
        gang_port_base: int = DEFAULT_GANG_PORT_BASE,
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
        replication: Replication | None = None,
        server_addresses: tuple[str, str, str] = ("", "", ""),
        trace_context: JobTraceContext | None = None,
        local_node: str | None = None,
    ) -> None:
        self._replication = replication
        self._traces = trace_context or NoTraceContext()
        self._beats = dict[str, float]()  # leading: node -> when we last heard its agent
        self._hub = runner if isinstance(runner, AgentHub) else None
        if self._hub is not None:
            self._hub.attach(self)
        self._runner = runner
        self._clock = clock
        self._ids = ids
        self._interval = schedule_interval_s
        self._live_view = LiveView()  # the placement view, kept in step with the state
        self._lock = replication.lock if replication is not None else threading.RLock()
        self._applied = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._check_heartbeats = check_heartbeats
        self._runs: dict[tuple[str, int], _Run] = {}  # (job, epoch) -> its running tasks
        self._metrics = scheduler_metrics or NoSchedulerMetrics()
        self._policy = scheduler_policy
        self._nominated: set[str] = set()  # preemptors waiting for their victims to stop
        self._local: ClusterState | None = None
        if replication is None:
            self._local = ClusterState(
                inventory,
                store.load(),
                hardware=hardware.load_hardware() if hardware is not None else (),
                policy=fault_policy,
            )
        self._s = Shared(
            lock=self._lock,
            applied=self._applied,
            wake=self._wake,
            stopping=self._stopping,
            clock=clock,
            runner=runner,
            hub=self._hub,
            replication=replication,
            read_state=lambda: self._state,
            execute=self._execute,
            stop_attempt=self._stop_attempt,
            on_exit=self._on_exit,
            runs=self._runs,
            nominated=self._nominated,
            addresses=server_addresses,
            local_node=local_node,
            beats=self._beats,
            grace=stop_grace_s,
        )
        self._leadership = Leadership(self._s)
        self._health = Health(self._s, gpu_reset, reset_in_background=reset_in_background)
        self._agents = Agents(self._s, self._health)
        self._admin = Admin(
            self._s,
            hardware=hardware,
            injector=injector,
            live_view=self._live_view,
            quotas=quotas,
            quota_store=quota_store,
            read_barrier=self._leadership.read_barrier,
            elsewhere=self._leadership.elsewhere,
        )
        self._membership = Membership(
            self._s, elsewhere=self._leadership.elsewhere, record=self._admin.record
        )
        self._jobs = Jobs(self._s, inventory, read_barrier=self._leadership.read_barrier)
        self._lifecycle = Lifecycle(
            self._s,
            loop=self._loop,
            start_due_resets=self._start_due_resets,
            shutdown_policy=shutdown_policy,
        )
        self._commands = Commands(
            self._s,
            store=store,
            publisher=publisher,
            hardware=hardware,
            elsewhere=self._leadership.elsewhere,
            accounted=self._agents.accounted,
            release_down_nodes=self._health.release_down_nodes,
            start_due_resets=self._health.start_due_resets,
        )
        self._launching = Launching(
            self._s,
            pin=pin_cpus,
            traces=self._traces,
            commit_all=self._commands.commit_all,
            effects=self._commands.effects,
            lock_let_go=self._commands.lock_let_go,
            lost=self._agents.lost,
            gang_port_base=gang_port_base,
        )
        self._scheduling = Scheduling(
            self._s,
            live_view=self._live_view,
            metrics=self._metrics,
            policy=self._policy,
            effective_quotas=self._effective_quotas,
            bind_all=self._launching.bind_all,
            bind_and_launch=self._launching.bind_and_launch,
        )

    @property
    def _state(self) -> ClusterState:
        """The cluster state: our own, or the replica's (read it under the lock)."""
        if self._local is not None:
            return self._local
        assert self._replication is not None
        return self._replication.state

    @property
    def _leading(self) -> bool:
        return self._s.leading

    @property
    def _grace(self) -> float:
        """The stop grace period in seconds (`kill` sets 0 for one cancel)."""
        return self._s.grace

    @_grace.setter
    def _grace(self, seconds: float) -> None:
        self._s.grace = seconds

    @property
    def replicated(self) -> bool:
        return self._replication is not None

    # -- lifecycle (control.lifecycle) ---------------------------------------------------------

    def recover(self) -> list[str]:
        """Requeue attempts left by a previous incarnation (reaping their processes)."""
        return self._lifecycle.recover()

    def start(self) -> None:
        """Recover, then run the scheduler loop on a dedicated thread (it also launches jobs).
        Replicated, there is nothing to recover here: the loop acts while this server leads,
        and agents tell the leader what still runs."""
        self._lifecycle.start()

    def shutdown(self) -> None:
        """Record running attempts per the shutdown policy, stop them, stop the loop (once).
        Replicated, jobs outlive this server (they run on agents): the loop stops, and only
        the attempts of this process's own agent are settled by the policy."""
        self._lifecycle.shutdown()
        self._launching.shutdown()

    def wait_ready(self, timeout: float) -> bool:
        """Replicated: wait until a leader is known and, with an agent in this process, its
        node is registered and that agent connected. True when ready in time."""
        return self._lifecycle.wait_ready(timeout)

    # -- JobService --------------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> Job:
        if self._stopping.is_set():
            raise InvalidRequest("server", "shutting down")
        token = spec.client_token
        job_id = self._ids.new_job_id() if token is None else token_job_id(spec.tenant, token)
        with self._unless_replicated():  # replicated: no lock held while the commit is awaited
            self._execute(SubmitJob(job_id, spec, self._now()))
        with self._lock:
            job = self._state.job(job_id)
            wake = self._scheduling.wants_cycle(job)  # not while it waits for a dependency
        if wake:
            self._wake.set()
        return job

    def submit_array(self, spec: JobSpec, array: ArraySpec | str) -> ArrayInfo:
        """One command (one Raft entry) creates every task of the array."""
        if self._stopping.is_set():
            raise InvalidRequest("server", "shutting down")
        if isinstance(array, str):
            array = parse_array(array)
        array_id = self._ids.new_job_id()
        with self._unless_replicated():
            self._execute(SubmitArray(array_id, spec, array, self._now()))
        self._wake.set()
        with self._lock:
            return self._array_info(array_id)

    def _unless_replicated(self) -> contextlib.AbstractContextManager[object]:
        """The state's lock, embedded (apply and persist are one step under it); nothing,
        replicated: the command path takes it where needed, never across a commit."""
        return contextlib.nullcontext() if self._replication is not None else self._lock

    # -- scheduling ----------------------------------------------------------------------------

    def schedule_once(self) -> int:
        """One scheduling cycle; returns how many jobs were bound and launched (see
        `control.scheduling`)."""
        return self._scheduling.schedule_once()

    def why(self, job_id: str) -> PendingReason | None:
        """Why a waiting job waits, as of the last scheduling cycle (None if it does not)."""
        return self._scheduling.why(job_id)

    def quotas(self) -> dict[str, Quota]:
        return self._admin.quotas()

    def _effective_quotas(self) -> dict[str, Quota]:
        return self._admin.effective_quotas()

    def set_quota(self, tenant: str, quota: Quota | None) -> None:
        """Set (or with None remove) a tenant's quota; stored, effective next cycle."""
        self._admin.set_quota(tenant, quota)

    def _on_exit(self, report: ExitReport) -> None:
        self._launching.on_exit(report)

    def wait_for(self, future: Future[object], timeout: float) -> None:
        self._commands.wait_for(future, timeout)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            cpu = time.thread_time()
            try:
                if self._replication is None or self._lead():
                    if self._check_heartbeats and self._judging_nodes():
                        self.check_nodes()
                    self.schedule_once()
            except (RaftNodeError, LeaderElsewhere) as exc:  # lost the lead mid-cycle
                log.info("scheduling cycle interrupted", error=str(exc))
            except Exception:  # a bug must not kill the loop silently
                log.exception("scheduling cycle failed")
            # every submit wakes the loop: on a long queue, cycles would run back to back and
            # hold the state's lock most of the time; pause as long as the cycle's CPU took
            # (a wake meanwhile is kept), so the submits of that time share the next cycle
            pause = min(time.thread_time() - cpu, self._interval)
            if pause > _MIN_PAUSE_S:
                self._stopping.wait(pause)
            self._wake.wait(self._interval)
            self._wake.clear()

    # -- leadership (replicated: control.leadership) --------------------------------------------

    def _lead(self) -> bool:
        return self._leadership.lead()

    def _judging_nodes(self) -> bool:
        return self._leadership.judging_nodes()

    def leader_addresses(self) -> tuple[int | None, str, str, str]:
        """(leader id, its REST URL, gRPC address, agent address) as this server knows them."""
        return self._leadership.leader_addresses()

    def _read_barrier(self) -> None:
        self._leadership.read_barrier()

    def _elsewhere(self) -> LeaderElsewhere:
        return self._leadership.elsewhere()

    # -- services (application.services drives these) -------------------------------------------

    def execute(self, command: Command) -> list[DomainEvent]:
        """Apply one cluster-state command (replicated: commit it through Raft first)."""
        return self._execute(command)

    def read_state(self, read: Callable[[ClusterState], _T]) -> _T:
        """`read(state)` under the state's lock (this server's copy of the state)."""
        with self._lock:
            return read(self._state)

    @property
    def acting(self) -> bool:
        """True where this server decides: embedded, or the replicated leader."""
        if self._stopping.is_set():
            return False
        return self._replication is None or self._leading

    # -- plumbing ------------------------------------------------------------------------------

    def _execute(self, command: Command) -> list[DomainEvent]:
        return self._commands.execute(command)

    def _stop_attempt(self, job_id: str, epoch: int, nodes: tuple[str, ...]) -> None:
        self._commands.stop_attempt(job_id, epoch, nodes)

    def _now(self) -> float:
        return self._clock.now()
