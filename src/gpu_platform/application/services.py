"""`ServiceManager`: services with replicas on top of the control plane's jobs.

Theory of operation. The service state lives in the replicated cluster state
(`domain.services`): user calls (`create_service`, `scale_service`, ...) apply one service
command each through the control plane (replicated: through Raft). A controller thread runs
`run_once` every `interval_s` (and at once after a user call): where this server decides
(embedded, or the Raft leader) it asks `domain.services.reconcile` what to do for each
service and does it — service commands through the control plane, replica jobs submitted
(idempotently, by client token) or cancelled. Every server, leader or not, rebuilds its
model routes (`routes()`, the gateway's `ModelRoutes`) from its own copy of the state each
round, so `routes()` is a dict lookup.

Thread-safety: every public method may be called from any thread.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

import structlog

from gpu_platform.domain.cluster_state import ClusterState, Command
from gpu_platform.domain.errors import DomainError, InvalidRequest, NotFound
from gpu_platform.domain.events import DomainEvent
from gpu_platform.domain.model.job import Job, JobSpec
from gpu_platform.domain.scheduling.model import PendingReason
from gpu_platform.domain.services.commands import (
    CreateService,
    DeleteService,
    ScaleService,
    UpdateService,
)
from gpu_platform.domain.services.model import ReplicaState, Service, ServiceSpec
from gpu_platform.domain.services.reconcile import (
    ENV_SERVICE,
    Action,
    StopReplicaJob,
    SubmitReplicaJob,
    reconcile,
    replica_state,
)
from gpu_platform.ports.inbound.model_routes import ModelRoute, ReplicaAddress
from gpu_platform.ports.inbound.services import ReplicaInfo, ServiceInfo
from gpu_platform.ports.outbound.clock import Clock

__all__ = ["ServiceManager", "ServicePlane"]

log = structlog.get_logger(__name__)
_T = TypeVar("_T")


class ServicePlane(Protocol):
    """What the manager needs of the control plane (`ControlPlane` has it all)."""

    @property
    def acting(self) -> bool: ...

    def execute(self, command: Command) -> list[DomainEvent]: ...

    def read_state(self, read: Callable[[ClusterState], _T]) -> _T: ...

    def submit(self, spec: JobSpec) -> Job: ...

    def cancel(self, job_id: str, reason: str = ...) -> Job: ...

    def why(self, job_id: str) -> PendingReason | None: ...


Snapshot = tuple[tuple[Service, ...], dict[str, Job], int]


def _snapshot(state: ClusterState) -> Snapshot:
    services = state.services.services()
    jobs: dict[str, Job] = {}
    for service in services:
        for replica in service.replicas:
            if replica.job_id:
                with contextlib.suppress(NotFound):
                    jobs[replica.job_id] = state.job(replica.job_id)
    return services, jobs, state.max_gpus_per_node()


class ServiceManager:
    """Implements `ports.inbound.services.ServicesApi` and `ports.inbound.ModelRoutes`."""

    def __init__(self, plane: ServicePlane, clock: Clock, *, interval_s: float = 0.25) -> None:
        self._plane = plane
        self._clock = clock
        self._interval = interval_s
        self._routes: Mapping[str, ModelRoute] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._round = threading.Lock()
        self._thread: threading.Thread | None = None
        self._swept = False  # orphaned replica jobs stopped since this server began to act

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="services", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.run_once()
            except Exception:  # the controller must outlive any one bad round
                log.exception("services round failed")
            self._wake.wait(self._interval)
            self._wake.clear()

    # -- ModelRoutes -------------------------------------------------------------------------

    def routes(self) -> Mapping[str, ModelRoute]:
        """Every servable model by name (rebuilt each controller round)."""
        return self._routes

    # -- ServicesApi -------------------------------------------------------------------------

    def create_service(self, spec: ServiceSpec, tenant: str | None = None) -> ServiceInfo:
        self._check(spec, tenant)
        self._plane.execute(CreateService(spec, self._clock.now()))
        return self._after(spec.name)

    def update_service(self, spec: ServiceSpec, tenant: str | None = None) -> ServiceInfo:
        self._check(spec, tenant)
        self.get_service(spec.name, tenant)
        self._plane.execute(UpdateService(spec, self._clock.now()))
        return self._after(spec.name)

    def scale_service(self, name: str, replicas: int, tenant: str | None = None) -> ServiceInfo:
        self.get_service(name, tenant)
        self._plane.execute(ScaleService(name, replicas, self._clock.now()))
        return self._after(name)

    def delete_service(self, name: str, tenant: str | None = None) -> ServiceInfo:
        info = self.get_service(name, tenant)
        self._plane.execute(DeleteService(name, self._clock.now()))
        self._wake.set()
        try:
            return self.get_service(name, tenant)
        except NotFound:  # it had no replicas: gone at once
            return ServiceInfo(info.spec, info.generation, info.created_at, True, ())

    def get_service(self, name: str, tenant: str | None = None) -> ServiceInfo:
        services, jobs, _ = self._plane.read_state(_snapshot)
        for service in services:
            if service.name == name and tenant in (None, service.spec.tenant):
                return self._info(service, jobs)
        raise NotFound("service", name)

    def list_services(self, tenant: str | None = None) -> list[ServiceInfo]:
        services, jobs, _ = self._plane.read_state(_snapshot)
        return [self._info(s, jobs) for s in services if tenant in (None, s.spec.tenant)]

    def _check(self, spec: ServiceSpec, tenant: str | None) -> None:
        """What the cluster, not the spec alone, rules out: another tenant, too many GPUs."""
        if tenant is not None and spec.tenant != tenant:
            raise InvalidRequest("tenant", f"may only be {tenant!r}")
        most = self._plane.read_state(lambda s: s.max_gpus_per_node())
        if spec.gpus > most:
            raise InvalidRequest(
                "gpus", f"{spec.gpus} GPUs per replica; no node has more than {most}"
            )

    def _after(self, name: str) -> ServiceInfo:
        self._wake.set()
        return self.get_service(name)

    def _info(self, service: Service, jobs: Mapping[str, Job]) -> ServiceInfo:
        replicas = []
        for r in service.replicas:
            job = jobs.get(r.job_id) if r.job_id else None
            state = replica_state(r, job)
            node, gpus = "", tuple[int, ...]()
            if job is not None and job.allocation is not None and not job.terminal:
                node, gpus = job.allocation.node, job.allocation.gpu_indices
            detail = r.detail
            if state is ReplicaState.PENDING and job is not None and not detail:
                why = self._plane.why(job.id)
                detail = why.message if why is not None else f"job {job.state.lower()}"
            address = r.address if state not in (ReplicaState.BACKOFF, ReplicaState.PENDING) else ""
            replicas.append(
                ReplicaInfo(
                    r.replica_id,
                    r.generation,
                    str(state),
                    r.job_id,
                    node,
                    gpus,
                    address,
                    state is ReplicaState.READY,
                    r.draining,
                    r.restarts,
                    detail,
                    r.not_before if r.ended else 0.0,
                )
            )
        return ServiceInfo(
            service.spec, service.generation, service.created_at, service.deleting, tuple(replicas)
        )

    # -- the controller ------------------------------------------------------------------------

    def run_once(self) -> None:
        """One round: rebuild the routes; where this server decides, reconcile every service."""
        with self._round:
            services, jobs, _ = self._plane.read_state(_snapshot)
            self._routes = _routes(services, jobs)
            if not self._plane.acting:
                self._swept = False
                return
            if not self._swept:
                self._stop_orphans()
                self._swept = True
            now = self._clock.now()
            for service in services:
                try:  # one service that cannot be reconciled must not stall the others
                    actions = reconcile(service, jobs.get, now)
                    if actions:
                        self._carry_out(actions)
                except Exception:
                    log.exception("service not reconciled", service=service.name)

    def _stop_orphans(self) -> None:
        """Stop replica jobs no service knows: the embedded core keeps its jobs across a
        restart but not its services (replicated, the two never part)."""

        def orphans(state: ClusterState) -> list[str]:
            return [
                job.id
                for job in state.open_jobs()
                if not job.terminal
                and any(key == ENV_SERVICE for key, _ in job.spec.env)
                and state.services.replica_of(job.id) is None
            ]

        for job_id in self._plane.read_state(orphans):
            try:
                self._plane.cancel(job_id, "service replica of no service")
            except DomainError as exc:
                log.info("orphan replica not stopped", job_id=job_id, error=str(exc))

    def _carry_out(self, actions: list[Action]) -> None:
        skip: set[str] = set()  # job ids whose LaunchReplica was refused
        for action in actions:
            try:
                if isinstance(action, SubmitReplicaJob):
                    if action.job_id not in skip:
                        self._plane.submit(action.spec)
                elif isinstance(action, StopReplicaJob):
                    self._plane.cancel(action.job_id, action.reason)
                else:
                    self._plane.execute(action)
            except DomainError as exc:
                log.info("service action refused", action=repr(action), error=str(exc))
                if not isinstance(action, SubmitReplicaJob | StopReplicaJob):
                    job_id = getattr(action, "job_id", "")
                    if job_id:
                        skip.add(job_id)


def _routes(services: tuple[Service, ...], jobs: Mapping[str, Job]) -> dict[str, ModelRoute]:
    routes: dict[str, ModelRoute] = {}
    for service in services:
        replicas = []
        for r in service.replicas:
            state = replica_state(r, jobs.get(r.job_id) if r.job_id else None)
            if (
                r.address
                and state is not ReplicaState.BACKOFF
                and state is not ReplicaState.PENDING
            ):
                ready = state is ReplicaState.READY or (r.draining and r.ready)
                replicas.append(ReplicaAddress(r.replica_id, r.address, ready, r.draining))
        model = service.spec.served_model
        routes[model] = ModelRoute(model, service.name, service.spec.tenant, tuple(replicas))
    return routes
