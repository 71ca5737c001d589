"""The replicated service commands (applied by `table.ServiceTable` inside `ClusterState`).

User commands: CreateService, UpdateService (a new spec: a new generation, rolled out
replica by replica), ScaleService, DeleteService. Leader commands (`reconcile` decides
them): LaunchReplica (a replica gets a new job: its first, or a restart), EndReplica (its
job ended), DrainReplica (it is being removed). Agent reports: ReportReplicaHealth (the
health check of one attempt changed). Every command carries `now`, the leader's clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_platform.domain.services.model import ServiceSpec

__all__ = [
    "SERVICE_COMMANDS",
    "CreateService",
    "DeleteService",
    "DrainReplica",
    "EndReplica",
    "LaunchReplica",
    "ReportReplicaHealth",
    "ScaleService",
    "ServiceCommand",
    "UpdateService",
]


@dataclass(frozen=True, slots=True)
class CreateService:
    spec: ServiceSpec
    now: float


@dataclass(frozen=True, slots=True)
class UpdateService:
    """Replace the spec of service `spec.name`; a change other than the replica count starts
    a rolling update to a new generation."""

    spec: ServiceSpec
    now: float


@dataclass(frozen=True, slots=True)
class ScaleService:
    name: str
    replicas: int
    now: float


@dataclass(frozen=True, slots=True)
class DeleteService:
    name: str
    now: float


@dataclass(frozen=True, slots=True)
class LaunchReplica:
    """Replica `replica_id` now runs as job `job_id` (a new replica, or a restart of one whose
    job ended and whose backoff has passed)."""

    service: str
    replica_id: str
    job_id: str
    now: float


@dataclass(frozen=True, slots=True)
class EndReplica:
    """The job of replica `replica_id` ended (`reason` says how): a draining replica is
    removed, any other waits out its backoff before it restarts."""

    service: str
    replica_id: str
    job_id: str
    reason: str
    now: float


@dataclass(frozen=True, slots=True)
class DrainReplica:
    service: str
    replica_id: str
    reason: str
    now: float


@dataclass(frozen=True, slots=True)
class ReportReplicaHealth:
    """An agent's health check of attempt `epoch` of job `job_id` changed: `ready`, the
    replica's `address` (``http://host:port``) and `detail` (why it is not ready)."""

    job_id: str
    epoch: int
    ready: bool
    address: str
    detail: str
    now: float


ServiceCommand = (
    CreateService
    | UpdateService
    | ScaleService
    | DeleteService
    | LaunchReplica
    | EndReplica
    | DrainReplica
    | ReportReplicaHealth
)
SERVICE_COMMANDS = (
    CreateService,
    UpdateService,
    ScaleService,
    DeleteService,
    LaunchReplica,
    EndReplica,
    DrainReplica,
    ReportReplicaHealth,
)
