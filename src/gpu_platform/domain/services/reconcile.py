"""What the leader does next for one service: a pure function of the service, its replicas'
jobs and the time.

Theory of operation. Every replica runs as a job. `reconcile` compares what the service
wants (`replicas` of the current generation, or none once deleted) with what runs, and
returns actions: service commands to apply (LaunchReplica, EndReplica, DrainReplica) and
jobs to submit or stop. The controller carries them out in order and calls again.

Rules, in the order they are applied:

1. A replica whose job ended is recorded ended (EndReplica): a draining one goes, any other
   restarts after its backoff (backoff_s * 2**(failures-1), capped). A replica whose job was
   never submitted (the leader changed in between) gets it submitted again (same job id).
2. A draining replica's job is stopped once `drain_s` has passed (it took no new traffic).
3. A replica not ready `startup_timeout_s` after its job started, or failing its checks
   `unhealthy_timeout_s` after it was ready, has its job stopped (then rule 1 restarts it).
4. Old-generation replicas that are not ready are drained at once (they carry no traffic).
5. Current-generation replicas beyond `replicas` are drained: not ready first, newest first.
6. Current-generation replicas in backoff whose time has come restart (LaunchReplica).
7. New replicas are launched while fewer than `replicas` of the current generation exist and,
   during a rolling update, at most one beyond `replicas` exists (the surge replica).
8. A ready old-generation replica is drained only while at least `replicas` others stay
   ready: new replicas are ready before old ones stop, so readiness never drops below
   `replicas` by the controller's own doing (below it only by failures: N-1 with one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpu_platform.domain.model.job import Job, JobSpec, JobState, token_job_id
from gpu_platform.domain.services.commands import DrainReplica, EndReplica, LaunchReplica
from gpu_platform.domain.services.engines import replica_argv
from gpu_platform.domain.services.model import Replica, ReplicaState, Service

__all__ = [
    "ENV_HEALTH",
    "ENV_PORT",
    "ENV_REPLICA",
    "ENV_SERVICE",
    "Action",
    "StopReplicaJob",
    "SubmitReplicaJob",
    "reconcile",
    "replica_job_id",
    "replica_job_spec",
    "replica_state",
    "spread_group",
]

ENV_SERVICE = "GPU_PLATFORM_SERVICE"
ENV_REPLICA = "GPU_PLATFORM_REPLICA"
ENV_PORT = "GPU_PLATFORM_PORT_ENV"
ENV_HEALTH = "GPU_PLATFORM_HEALTH_PATH"


@dataclass(frozen=True, slots=True)
class SubmitReplicaJob:
    """Submit `spec` (idempotent: its client token names job `job_id`)."""

    job_id: str
    spec: JobSpec


@dataclass(frozen=True, slots=True)
class StopReplicaJob:
    job_id: str
    reason: str


Action = SubmitReplicaJob | StopReplicaJob | LaunchReplica | EndReplica | DrainReplica


def _token(service: Service, replica_id: str, incarnation: int) -> str:
    return f"svc.{service.name}.{service.created_at!r}.{replica_id}.{incarnation}"


def replica_job_id(service: Service, replica_id: str, incarnation: int) -> str:
    return token_job_id(service.spec.tenant, _token(service, replica_id, incarnation))


def spread_group(service: Service) -> str:
    """The spread group of a service's replica jobs: they prefer nodes holding no other."""
    return f"service:{service.spec.tenant}/{service.name}"


def replica_job_spec(service: Service, replica_id: str, incarnation: int) -> JobSpec:
    """The job that runs incarnation `incarnation` of replica `replica_id` (current spec)."""
    spec = service.spec
    env = (
        *spec.env,
        (ENV_SERVICE, spec.name),
        (ENV_REPLICA, replica_id),
        (ENV_PORT, spec.port_env),
        (ENV_HEALTH, spec.health_path),
    )
    return JobSpec(
        replica_argv(spec),
        gpus=spec.gpus,
        gpu_milli=spec.gpu_milli,
        gpu_memory_bytes=spec.gpu_memory_bytes,
        name=f"{spec.name}/{replica_id}",
        tenant=spec.tenant,
        priority=spec.priority,
        preemptible=spec.preemptible,
        env=env,
        client_token=_token(service, replica_id, incarnation),
        spread=spread_group(service),
    )


def replica_state(replica: Replica, job: Job | None) -> ReplicaState:
    """Where a replica stands, from its record and its job (see `model`)."""
    if replica.draining:
        return ReplicaState.DRAINING
    if replica.ended:
        return ReplicaState.BACKOFF
    if job is None or job.state is not JobState.RUNNING or job.allocation is None:
        return ReplicaState.PENDING
    if replica.epoch != job.allocation.epoch:
        return ReplicaState.STARTING
    if replica.ready:
        return ReplicaState.READY
    return ReplicaState.UNHEALTHY if replica.was_ready else ReplicaState.STARTING


def _why_ended(job: Job) -> str:
    what = f"job {job.id} {job.state.lower()}"
    if job.exit_code is not None:
        what += f" (exit code {job.exit_code})"
    return f"{what}: {job.reason}" if job.reason else what


@dataclass(slots=True)
class _View:
    replica: Replica
    job: Job | None
    state: ReplicaState

    @property
    def number(self) -> int:
        return int(self.replica.replica_id.rsplit("-", 1)[1])


def reconcile(service: Service, job_of: Callable[[str], Job | None], now: float) -> list[Action]:
    """The actions that move `service` toward what it wants (see the module docstring)."""
    spec, name, generation = service.spec, service.name, service.generation
    wanted = 0 if service.deleting else spec.replicas
    actions: list[Action] = []
    live: list[_View] = []
    for replica in service.replicas:
        job = job_of(replica.job_id) if replica.job_id else None
        if replica.job_id and job is None:
            if replica.draining or replica.generation != generation:
                actions.append(EndReplica(name, replica.replica_id, replica.job_id, "lost", now))
                continue
            spec_now = replica_job_spec(service, replica.replica_id, replica.incarnation)
            actions.append(SubmitReplicaJob(replica.job_id, spec_now))
        elif job is not None and job.terminal:
            actions.append(EndReplica(name, replica.replica_id, job.id, _why_ended(job), now))
            if replica.draining:
                continue
            # its backoff is decided by the table: it restarts in a later round
            ended = Replica(replica.replica_id, replica.generation, ended=True, not_before=now)
            live.append(_View(ended, None, ReplicaState.BACKOFF))
            continue
        view = _View(replica, job, replica_state(replica, job))
        if replica.draining:
            if job is not None and now - replica.since >= spec.drain_s:
                actions.append(StopReplicaJob(job.id, "replica drained"))
            continue
        stop = _health_stop(service, view, now)
        if stop is not None:
            actions.append(stop)
        live.append(view)
    _shape(service, live, wanted, now, actions)
    return actions


def _health_stop(service: Service, view: _View, now: float) -> StopReplicaJob | None:
    spec, replica, job = service.spec, view.replica, view.job
    if job is None:
        return None
    detail = f": {replica.detail}" if replica.detail else ""
    if view.state is ReplicaState.STARTING:
        started = job.started_at if job.started_at is not None else replica.since
        if now - started >= spec.startup_timeout_s:
            why = f"not ready {spec.startup_timeout_s:g}s after start{detail}"
            return StopReplicaJob(job.id, why)
    if view.state is ReplicaState.UNHEALTHY and now - replica.since >= spec.unhealthy_timeout_s:
        why = f"health check failing for {spec.unhealthy_timeout_s:g}s{detail}"
        return StopReplicaJob(job.id, why)
    return None


def _shape(
    service: Service, live: list[_View], wanted: int, now: float, actions: list[Action]
) -> None:
    """Rules 4-8: drain, restart and launch replicas."""
    name, generation = service.name, service.generation

    def drain(view: _View, reason: str) -> None:
        actions.append(DrainReplica(name, view.replica.replica_id, reason, now))
        live.remove(view)

    for view in [v for v in live if v.replica.generation != generation]:
        if view.state is not ReplicaState.READY:
            drain(view, f"replaced by generation {generation}")
    current = [v for v in live if v.replica.generation == generation]
    extra = len(current) - wanted
    if extra > 0:
        order = sorted(current, key=lambda v: (v.state is ReplicaState.READY, -v.number))
        for view in order[:extra]:
            drain(view, "scaled down" if not service.deleting else "service deleted")
            current.remove(view)
    for view in current:
        r = view.replica
        if r.ended and now >= r.not_before and not _ended_now(actions, r.replica_id):
            job_id = replica_job_id(service, r.replica_id, r.incarnation + 1)
            actions.append(LaunchReplica(name, r.replica_id, job_id, now))
            spec = replica_job_spec(service, r.replica_id, r.incarnation + 1)
            actions.append(SubmitReplicaJob(job_id, spec))
    old = [v for v in live if v.replica.generation != generation]
    surge = 1 if old else 0
    number = service.next_replica
    while len(current) < wanted and len(live) < wanted + surge:
        replica_id = f"{name}-{number}"
        job_id = replica_job_id(service, replica_id, 1)
        actions.append(LaunchReplica(name, replica_id, job_id, now))
        actions.append(SubmitReplicaJob(job_id, replica_job_spec(service, replica_id, 1)))
        view = _View(Replica(replica_id, generation, job_id), None, ReplicaState.PENDING)
        current.append(view)
        live.append(view)
        number += 1
    ready = sum(1 for v in live if v.state is ReplicaState.READY)
    for view in sorted(old, key=lambda v: v.number):
        if ready - 1 >= wanted:
            drain(view, f"replaced by generation {generation}")
            ready -= 1


def _ended_now(actions: list[Action], replica_id: str) -> bool:
    return any(isinstance(a, EndReplica) and a.replica_id == replica_id for a in actions)
