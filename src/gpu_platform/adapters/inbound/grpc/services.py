# ruff: noqa: N802  (servicer methods are the proto's RPC names)
"""gRPC ServingService over the ServicesApi port (docs/services.md).

Errors as in `grpc.server`: a bad spec is INVALID_ARGUMENT naming the field ("field: reason",
and the `field` trailing metadata), an unknown service NOT_FOUND, a taken name or a service
being deleted FAILED_PRECONDITION. Users act in their own tenant (another one is
PERMISSION_DENIED); operators and admins in any.
"""

from __future__ import annotations

import grpc

from gpu_platform.adapters.inbound.grpc.auth import current_principal
from gpu_platform.adapters.inbound.grpc.outcomes import call as _call
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.adapters.inbound.service_fields import replica_values, spec_values
from gpu_platform.domain.model.tenancy import Forbidden, Permission
from gpu_platform.domain.services.model import ServiceSpec
from gpu_platform.ports.inbound.services import ServiceInfo, ServicesApi

__all__ = ["ServingServicer", "service_spec_from_pb", "service_to_pb"]


def service_spec_from_pb(m: pb.ServiceSpec, tenant: str) -> ServiceSpec:
    return ServiceSpec(
        name=m.name,
        command=tuple(m.command),
        replicas=m.replicas,
        gpus=m.gpus,
        gpu_milli=m.gpu_milli if m.HasField("gpu_milli") else 1000,
        gpu_memory_bytes=m.gpu_memory_bytes if m.HasField("gpu_memory_bytes") else None,
        tenant=m.tenant or tenant,
        priority=m.priority,
        preemptible=m.preemptible if m.HasField("preemptible") else True,
        port_env=m.port_env or "PORT",
        health_path=m.health_path or "/health",
        engine=m.engine or "custom",
        model=m.model,
        env=tuple(sorted(m.env.items())),
        startup_timeout_s=m.startup_timeout_s or 600.0,
        unhealthy_timeout_s=m.unhealthy_timeout_s or 30.0,
        backoff_s=m.backoff_s or 1.0,
        max_backoff_s=m.max_backoff_s or 60.0,
        drain_s=m.drain_s if m.HasField("drain_s") else 2.0,
    )


def service_to_pb(s: ServiceInfo) -> pb.Service:
    spec = s.spec
    return pb.Service(
        spec=pb.ServiceSpec(**spec_values(spec)),
        generation=s.generation,
        created_at=s.created_at,
        deleting=s.deleting,
        ready=s.ready,
        replicas=[pb.ServiceReplica(**replica_values(r)) for r in s.replicas],
    )


class ServingServicer(pb_grpc.ServingServiceServicer):
    def __init__(self, services: ServicesApi) -> None:
        self._services = services

    @staticmethod
    def _scope(write: bool) -> tuple[str | None, str]:
        """(the tenant the caller is confined to, None = any; the caller's own tenant)."""
        who = current_principal()
        who.require(Permission.JOBS_WRITE if write else Permission.JOBS_READ)
        return (None if who.may(Permission.JOBS_ANY_TENANT) else who.tenant), who.tenant

    def _spec(self, request: pb.ServiceSpec) -> tuple[ServiceSpec, str | None]:
        scope, own = self._scope(write=True)
        spec = service_spec_from_pb(request, own)
        if scope is not None and spec.tenant != scope:
            raise Forbidden(f"may only act in tenant {scope!r}")
        return spec, scope

    def CreateService(self, request: pb.ServiceSpec, context: grpc.ServicerContext) -> pb.Service:
        def create() -> ServiceInfo:
            spec, scope = self._spec(request)
            return self._services.create_service(spec, scope)

        return service_to_pb(_call(context, create))

    def UpdateService(self, request: pb.ServiceSpec, context: grpc.ServicerContext) -> pb.Service:
        def update() -> ServiceInfo:
            spec, scope = self._spec(request)
            return self._services.update_service(spec, scope)

        return service_to_pb(_call(context, update))

    def ScaleService(
        self, request: pb.ServiceScaleRequest, context: grpc.ServicerContext
    ) -> pb.Service:
        def scale() -> ServiceInfo:
            scope, _ = self._scope(write=True)
            return self._services.scale_service(request.name, request.replicas, scope)

        return service_to_pb(_call(context, scale))

    def DeleteService(self, request: pb.ServiceName, context: grpc.ServicerContext) -> pb.Service:
        def delete() -> ServiceInfo:
            scope, _ = self._scope(write=True)
            return self._services.delete_service(request.name, scope)

        return service_to_pb(_call(context, delete))

    def GetService(self, request: pb.ServiceName, context: grpc.ServicerContext) -> pb.Service:
        def get() -> ServiceInfo:
            scope, _ = self._scope(write=False)
            return self._services.get_service(request.name, scope)

        return service_to_pb(_call(context, get))

    def ListServices(
        self, request: pb.ServiceListRequest, context: grpc.ServicerContext
    ) -> pb.ServiceListResponse:
        def list_all() -> list[ServiceInfo]:
            scope, _ = self._scope(write=False)
            return self._services.list_services(scope)

        return pb.ServiceListResponse(services=[service_to_pb(s) for s in _call(context, list_all)])
