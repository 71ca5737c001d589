"""`ServiceTable`: the services of the cluster, changed only by `apply(ServiceCommand)`.

Part of `ClusterState` (so a Raft log drives it and snapshots carry it). Deterministic: no
clock, every time comes in a command. A command about an unknown service raises NotFound; a
malformed one InvalidRequest naming the field; a report for an attempt older than the last
one heard, or for a job no replica runs, changes nothing (it is stale).

Invariants (`check_invariants`): replica ids are unique within a service and below its
`next_replica`; a job runs at most one replica of all services (the job index equals a scan);
a replica in backoff has no job. A new replica is refused while `replicas + 1` are not
draining (at most one surge replica during a rolling update).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gpu_platform.domain.errors import Conflict, InvalidRequest, NotFound
from gpu_platform.domain.events import DomainEvent
from gpu_platform.domain.services.commands import (
    CreateService,
    DeleteService,
    DrainReplica,
    EndReplica,
    LaunchReplica,
    ReportReplicaHealth,
    ScaleService,
    ServiceCommand,
    UpdateService,
)
from gpu_platform.domain.services.model import (
    MAX_REPLICAS,
    Replica,
    Service,
    ServiceSpec,
    backoff_s,
    check_spec,
)

__all__ = ["ServiceTable"]


class ServiceTable:
    """Services by name (creation order) and the index job id -> (service, replica id)."""

    def __init__(self, services: Iterable[Service] = ()) -> None:
        self._services: dict[str, Service] = {}
        self._by_job: dict[str, tuple[str, str]] = {}
        self.version = 0  # bumped on every change (readers keep derived views in step)
        for service in services:
            self._put(service)

    # -- queries -----------------------------------------------------------------------------

    def services(self) -> tuple[Service, ...]:
        return tuple(self._services.values())

    def get(self, name: str) -> Service:
        try:
            return self._services[name]
        except KeyError:
            raise NotFound("service", name) from None

    def find(self, name: str) -> Service | None:
        return self._services.get(name)

    def replica_of(self, job_id: str) -> tuple[str, str] | None:
        """(service, replica id) of the replica job `job_id` runs, if any."""
        return self._by_job.get(job_id)

    # -- commands ----------------------------------------------------------------------------

    def apply(self, command: ServiceCommand) -> list[DomainEvent]:
        match command:
            case CreateService(spec, now):
                self._create(spec, now)
            case UpdateService(spec, now):
                self._update(spec)
            case ScaleService(name, replicas, now):
                self._scale(name, replicas)
            case DeleteService(name, now):
                self._put(replace(self.get(name), deleting=True))
            case LaunchReplica():
                self._launch(command)
            case EndReplica():
                self._end(command)
            case DrainReplica(name, replica_id, reason, now):
                self._drain(name, replica_id, reason, now)
            case ReportReplicaHealth():
                self._report(command)
        return []

    def _create(self, spec: ServiceSpec, now: float) -> None:
        _check(spec)
        if spec.name in self._services:
            raise Conflict(f"service {spec.name!r} already exists")
        self._put(Service(spec, generation=1, created_at=now))

    def _update(self, spec: ServiceSpec) -> None:
        _check(spec)
        service = self._live(spec.name)
        same = replace(spec, replicas=service.spec.replicas) == service.spec
        generation = service.generation if same else service.generation + 1
        self._put(replace(service, spec=spec, generation=generation))

    def _scale(self, name: str, replicas: int) -> None:
        if not 0 <= replicas <= MAX_REPLICAS:
            raise InvalidRequest("replicas", f"must be in 0..{MAX_REPLICAS}")
        service = self._live(name)
        self._put(replace(service, spec=replace(service.spec, replicas=replicas)))

    def _live(self, name: str) -> Service:
        service = self.get(name)
        if service.deleting:
            raise Conflict(f"service {name!r} is being deleted")
        return service

    def _launch(self, cmd: LaunchReplica) -> None:
        service = self.get(cmd.service)
        if cmd.job_id in self._by_job:
            raise Conflict(f"job {cmd.job_id} already runs a replica")
        old = service.replica(cmd.replica_id)
        if old is None:
            expected = f"{service.name}-{service.next_replica}"
            if cmd.replica_id != expected:
                raise InvalidRequest("replica_id", f"the next replica is {expected}")
            if service.deleting:
                raise Conflict(f"service {service.name!r} is being deleted")
            live = sum(1 for r in service.replicas if not r.draining)
            if live >= service.spec.replicas + 1:
                raise Conflict(f"service {service.name!r} has {live} replicas already")
            new = Replica(cmd.replica_id, service.generation, cmd.job_id, since=cmd.now)
            service = replace(
                service, next_replica=service.next_replica + 1, replicas=(*service.replicas, new)
            )
        else:
            if not old.ended or old.draining:
                raise Conflict(f"replica {cmd.replica_id} is not waiting for a restart")
            new = replace(
                old,
                job_id=cmd.job_id,
                incarnation=old.incarnation + 1,
                restarts=old.restarts + 1,
                ended=False,
                since=cmd.now,
                epoch=0,
                address="",
                ready=False,
                was_ready=False,
            )
            service = _with(service, new)
        self._put(service)

    def _end(self, cmd: EndReplica) -> None:
        service = self.get(cmd.service)
        replica = service.replica(cmd.replica_id)
        if replica is None or replica.job_id != cmd.job_id or replica.ended:
            return  # stale: that job no longer runs this replica
        if replica.draining:
            self._put(replace(service, replicas=_without(service, cmd.replica_id)))
            return
        failures = replica.failures + 1
        ended = replace(
            replica,
            job_id="",
            ended=True,
            failures=failures,
            not_before=cmd.now + backoff_s(service.spec, failures),
            since=cmd.now,
            ready=False,
            address="",
            detail=cmd.reason,
        )
        self._put(_with(service, ended))

    def _drain(self, name: str, replica_id: str, reason: str, now: float) -> None:
        service = self.get(name)
        replica = service.replica(replica_id)
        if replica is None:
            raise NotFound("replica", replica_id)
        if replica.ended or not replica.job_id:  # nothing runs: it goes at once
            self._put(replace(service, replicas=_without(service, replica_id)))
        elif not replica.draining:
            self._put(_with(service, replace(replica, draining=True, since=now, detail=reason)))

    def _report(self, cmd: ReportReplicaHealth) -> None:
        where = self._by_job.get(cmd.job_id)
        if where is None:
            return
        service = self._services[where[0]]
        replica = service.replica(where[1])
        assert replica is not None
        if cmd.epoch < replica.epoch:
            return
        changed = cmd.ready != replica.ready or cmd.epoch != replica.epoch
        updated = replace(
            replica,
            epoch=cmd.epoch,
            ready=cmd.ready,
            address=cmd.address,
            detail="" if cmd.ready else cmd.detail,
            was_ready=(replica.was_ready and cmd.epoch == replica.epoch) or cmd.ready,
            failures=0 if cmd.ready else replica.failures,
            since=cmd.now if changed else replica.since,
        )
        self._put(_with(service, updated))

    # -- bookkeeping -------------------------------------------------------------------------

    def _put(self, service: Service) -> None:
        old = self._services.get(service.name)
        if old is not None:
            for r in old.replicas:
                if r.job_id:
                    self._by_job.pop(r.job_id, None)
        if service.deleting and not service.replicas:
            self._services.pop(service.name, None)
        else:
            self._services[service.name] = service
            for r in service.replicas:
                if r.job_id:
                    self._by_job[r.job_id] = (service.name, r.replica_id)
        self.version += 1

    def check_invariants(self) -> None:
        index: dict[str, tuple[str, str]] = {}
        for service in self._services.values():
            ids = [r.replica_id for r in service.replicas]
            assert len(ids) == len(set(ids)), f"{service.name}: duplicate replica ids"
            for r in service.replicas:
                number = int(r.replica_id.rsplit("-", 1)[1])
                assert number < service.next_replica, f"{r.replica_id} beyond next_replica"
                assert not (r.ended and r.job_id), f"{r.replica_id} in backoff holds a job"
                if r.job_id:
                    assert r.job_id not in index, f"job {r.job_id} runs two replicas"
                    index[r.job_id] = (service.name, r.replica_id)
        assert index == self._by_job, "job index disagrees with the replicas"


def _check(spec: ServiceSpec) -> None:
    try:
        check_spec(spec)
    except ValueError as exc:
        field, _, why = str(exc).partition(": ")
        raise InvalidRequest(field, why) from None


def _with(service: Service, replica: Replica) -> Service:
    rid = replica.replica_id
    return replace(
        service, replicas=tuple(replica if r.replica_id == rid else r for r in service.replicas)
    )


def _without(service: Service, replica_id: str) -> tuple[Replica, ...]:
    return tuple(r for r in service.replicas if r.replica_id != replica_id)
