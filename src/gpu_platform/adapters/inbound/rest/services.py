"""REST routes over the ServicesApi port (docs/services.md).

    POST   /v1/services                  ServiceIn -> 201 ServiceOut
    GET    /v1/services                  [ServiceOut]
    GET    /v1/services/{name}           ServiceOut (describe: every replica)
    PUT    /v1/services/{name}           ServiceIn: a rolling update to the new spec
    POST   /v1/services/{name}/scale     {"replicas": N}
    DELETE /v1/services/{name}           drains and stops every replica, then it is gone

Users act in their own tenant (`tenant` defaults to it; another one is 403); operators and
admins in any. Errors: 422 names the field, 404 unknown service, 409 name taken or being
deleted.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from gpu_platform.adapters.inbound.rest.auth import Auth
from gpu_platform.adapters.inbound.rest.problems import CONFLICT, NOT_FOUND
from gpu_platform.adapters.inbound.service_fields import (
    replica_values,
    spec_from_values,
    spec_values,
)
from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.domain.model.tenancy import Forbidden, Permission, Principal
from gpu_platform.domain.services.model import ENV_NAME_PATTERN, NAME_PATTERN, ServiceSpec
from gpu_platform.ports.inbound.services import ReplicaInfo, ServiceInfo, ServicesApi

__all__ = ["ReplicaOut", "ServiceIn", "ServiceOut", "services_router"]

Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN, max_length=63)]
PathName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]
EnvName = Annotated[str, StringConstraints(pattern=ENV_NAME_PATTERN, max_length=128)]


class ServiceIn(BaseModel):
    """A service spec (POST /v1/services, PUT /v1/services/{name})."""

    model_config = ConfigDict(extra="forbid")

    name: Name = Field(description="1-63 of a-z, 0-9 and '-' (DNS label)")
    command: list[Annotated[str, StringConstraints(min_length=1)]] = Field(
        default_factory=list,
        max_length=4096,
        description="argv of one replica (custom), or extra arguments for an engine",
    )
    replicas: int = Field(1, ge=0, le=256)
    gpus: int = Field(0, ge=0, le=4096, description="whole GPUs per replica (one node)")
    gpu_milli: int = Field(
        1000, ge=1, le=1000, description="< 1000 with gpus = 1: each replica a share of one GPU"
    )
    gpu_memory_bytes: int | None = Field(
        None, gt=0, description="a share's pinned device memory (the MPS limit)"
    )
    tenant: str | None = Field(None, min_length=1, max_length=64)
    priority: int = Field(0, ge=-1000, le=1000)
    preemptible: bool = True
    port_env: EnvName = Field("PORT", description="env var that carries the replica's port")
    health_path: str = Field("/health", pattern=r"^/", max_length=256)
    engine: Literal["custom", "vllm", "sglang", "llama.cpp", "transformers"] = "custom"
    model: str = Field("", max_length=256, description="model name (engines: what to load)")
    env: dict[EnvName, str] = Field(default_factory=dict, max_length=256)
    startup_timeout_s: float = Field(600.0, gt=0, le=86400)
    unhealthy_timeout_s: float = Field(30.0, gt=0, le=86400)
    backoff_s: float = Field(1.0, gt=0, le=3600)
    max_backoff_s: float = Field(60.0, gt=0, le=86400)
    drain_s: float = Field(2.0, ge=0, le=3600)

    @classmethod
    def of(cls, spec: ServiceSpec) -> ServiceIn:
        return cls(**spec_values(spec))

    def to_spec(self, default_tenant: str) -> ServiceSpec:
        return spec_from_values(self.model_dump(), default_tenant)


class ScaleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replicas: int = Field(ge=0, le=256)


class ReplicaOut(BaseModel):
    replica_id: str
    generation: int
    state: str
    job_id: str
    node: str
    gpus: list[int]
    address: str
    ready: bool
    draining: bool
    restarts: int
    detail: str
    restart_at: float | None = Field(description="when a replica in BACKOFF restarts")

    @classmethod
    def of(cls, r: ReplicaInfo) -> ReplicaOut:
        return cls(**replica_values(r))


class ServiceOut(BaseModel):
    name: str
    tenant: str
    model: str
    engine: str
    command: list[str]
    replicas: int
    ready: int
    gpus: int
    gpu_milli: int = Field(description="< 1000: each replica a share of one GPU")
    priority: int
    port_env: str
    health_path: str
    generation: int
    created_at: float
    deleting: bool
    spec: ServiceIn = Field(description="the whole spec (PUT it back, changed, to update)")
    replica_set: list[ReplicaOut] = Field(description="every replica (describe)")

    @classmethod
    def of(cls, s: ServiceInfo) -> ServiceOut:
        return cls(
            name=s.spec.name,
            tenant=s.spec.tenant,
            model=s.spec.served_model,
            engine=s.spec.engine,
            command=list(s.spec.command),
            replicas=s.spec.replicas,
            ready=s.ready,
            gpus=s.spec.gpus,
            gpu_milli=s.spec.gpu_milli,
            priority=s.spec.priority,
            port_env=s.spec.port_env,
            health_path=s.spec.health_path,
            generation=s.generation,
            created_at=s.created_at,
            deleting=s.deleting,
            spec=ServiceIn.of(s.spec),
            replica_set=[ReplicaOut.of(r) for r in s.replicas],
        )


def services_router(services: ServicesApi, auth: Auth) -> APIRouter:
    router = APIRouter(tags=["services"])

    def scope(who: Principal) -> str | None:
        return None if who.may(Permission.JOBS_ANY_TENANT) else who.tenant

    def spec_of(body: ServiceIn, who: Principal) -> ServiceSpec:
        spec = body.to_spec(default_tenant=who.tenant)
        tenant = scope(who)
        if tenant is not None and spec.tenant != tenant:
            raise Forbidden(f"principal {who.name!r} may only act in tenant {tenant!r}")
        return spec

    reader = auth.require(Permission.JOBS_READ)
    writer = auth.require(Permission.JOBS_WRITE)

    @router.post("/v1/services", status_code=201, response_model=ServiceOut, responses=CONFLICT)
    async def create(body: ServiceIn, who: Principal = Depends(writer)) -> ServiceOut:
        spec = spec_of(body, who)
        info = await run_in_threadpool(services.create_service, spec, scope(who))
        return ServiceOut.of(info)

    @router.get("/v1/services", response_model=list[ServiceOut])
    async def list_all(who: Principal = Depends(reader)) -> list[ServiceOut]:
        found = await run_in_threadpool(services.list_services, scope(who))
        return [ServiceOut.of(s) for s in found]

    @router.get("/v1/services/{name}", response_model=ServiceOut, responses=NOT_FOUND)
    async def describe(name: PathName, who: Principal = Depends(reader)) -> ServiceOut:
        return ServiceOut.of(await run_in_threadpool(services.get_service, name, scope(who)))

    @router.put(
        "/v1/services/{name}", response_model=ServiceOut, responses={**NOT_FOUND, **CONFLICT}
    )
    async def update(
        name: PathName, body: ServiceIn, who: Principal = Depends(writer)
    ) -> ServiceOut:
        spec = spec_of(body, who)
        if spec.name != name:
            raise InvalidRequest("name", f"the body names {spec.name!r}, the path {name!r}")
        info = await run_in_threadpool(services.update_service, spec, scope(who))
        return ServiceOut.of(info)

    @router.post(
        "/v1/services/{name}/scale",
        response_model=ServiceOut,
        responses={**NOT_FOUND, **CONFLICT},
    )
    async def scale(name: PathName, body: ScaleIn, who: Principal = Depends(writer)) -> ServiceOut:
        info = await run_in_threadpool(services.scale_service, name, body.replicas, scope(who))
        return ServiceOut.of(info)

    @router.delete("/v1/services/{name}", response_model=ServiceOut, responses=NOT_FOUND)
    async def delete(name: PathName, who: Principal = Depends(writer)) -> ServiceOut:
        return ServiceOut.of(await run_in_threadpool(services.delete_service, name, scope(who)))

    return router
