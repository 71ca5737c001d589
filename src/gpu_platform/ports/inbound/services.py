"""Inbound port: long-running services with replicas (what REST, gRPC and the CLI drive).

Read models: `ServiceInfo` (the spec, its generation, how many replicas are ready) with one
`ReplicaInfo` per replica (state, node, GPUs, restarts, address, and why it is not ready).
Errors: `InvalidRequest(field, ...)` for a bad spec, `NotFound` for an unknown service (or
one of another tenant, when `tenant` scopes the call), `Conflict` for a name taken or a
service being deleted. `tenant=None` sees every tenant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gpu_platform.domain.services.model import ServiceSpec

__all__ = ["ReplicaInfo", "ServiceInfo", "ServicesApi"]


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """One replica as `describe` shows it. `state` is a `ReplicaState` value; `detail` says
    why it is not ready (or why its last job ended); `node`/`gpus` are empty until placed."""

    replica_id: str
    generation: int
    state: str
    job_id: str
    node: str
    gpus: tuple[int, ...]
    address: str
    ready: bool
    draining: bool
    restarts: int
    detail: str
    not_before: float


@dataclass(frozen=True, slots=True)
class ServiceInfo:
    spec: ServiceSpec
    generation: int
    created_at: float
    deleting: bool
    replicas: tuple[ReplicaInfo, ...]

    @property
    def ready(self) -> int:
        return sum(1 for r in self.replicas if r.state == "READY")


class ServicesApi(Protocol):
    def create_service(self, spec: ServiceSpec, tenant: str | None = None) -> ServiceInfo: ...

    def update_service(self, spec: ServiceSpec, tenant: str | None = None) -> ServiceInfo: ...

    def scale_service(self, name: str, replicas: int, tenant: str | None = None) -> ServiceInfo: ...

    def delete_service(self, name: str, tenant: str | None = None) -> ServiceInfo: ...

    def get_service(self, name: str, tenant: str | None = None) -> ServiceInfo: ...

    def list_services(self, tenant: str | None = None) -> list[ServiceInfo]: ...
