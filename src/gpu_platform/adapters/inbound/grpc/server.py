"""The gRPC server: JobService, ClusterService, AdminService, grpc.health.v1 and reflection.

Errors map like REST's: InvalidRequest -> INVALID_ARGUMENT ("field: reason"; the field is also
in the `field` trailing-metadata key), NotFound -> NOT_FOUND (also another tenant's job),
Conflict -> FAILED_PRECONDITION, Unauthenticated -> UNAUTHENTICATED, Forbidden ->
PERMISSION_DENIED, TooManyRequests (rate or admission limit) -> RESOURCE_EXHAUSTED with
`retry-after` trailing metadata. Authentication, rate limits and expired deadlines are checked
by `grpc.auth.AuthInterceptor` before a servicer runs; a unary call past its deadline is
cancelled by grpc; WatchJobs ends when the client goes away or its deadline passes. TLS (and
mTLS when a client CA is given) when `tls` is set.
"""

from __future__ import annotations

import os
import queue
from collections.abc import Iterator
from concurrent import futures
from typing import Any, Protocol, TypeVar

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from opentelemetry.trace import TracerProvider

from gpu_platform.adapters.grpc_bind import NO_PORT_REUSE, bind_port
from gpu_platform.adapters.inbound.grpc.admin import AdminServicer
from gpu_platform.adapters.inbound.grpc.auth import (
    AuthInterceptor,
    current_principal,
)
from gpu_platform.adapters.inbound.grpc.convert import (
    array_to_pb,
    gpu_to_pb,
    job_to_pb,
    spec_from_pb,
    status_to_pb,
)
from gpu_platform.adapters.inbound.grpc.front_core import SubmitItems
from gpu_platform.adapters.inbound.grpc.front_link import BatchListener
from gpu_platform.adapters.inbound.grpc.interceptors import MetricsInterceptor, TracingInterceptor
from gpu_platform.adapters.inbound.grpc.outcomes import call as _call
from gpu_platform.adapters.inbound.grpc.run_as import RunAsServicer
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.adapters.tls import TlsFiles
from gpu_platform.application.auth import OpenAccess
from gpu_platform.application.auth_scope import AuditTrail, TenantScope
from gpu_platform.domain.errors import (
    NotFound,
)
from gpu_platform.domain.events import DomainEvent
from gpu_platform.ports.inbound.access import AccessService
from gpu_platform.ports.inbound.admin_service import AdminService
from gpu_platform.ports.inbound.job_service import JobService
from gpu_platform.ports.inbound.run_as import RunAsAdmin
from gpu_platform.ports.inbound.services import ServicesApi
from gpu_platform.ports.outbound.metrics import ApiMetrics

__all__ = ["EventSource", "GrpcServer"]

log = structlog.get_logger(__name__)
T = TypeVar("T")
WATCH_POLL_S = 0.25


class EventSource(Protocol):
    """Where WatchJobs gets live events (the EventHub)."""

    def subscribe(self) -> Any: ...


class JobServicer(pb_grpc.JobServiceServicer):
    def __init__(
        self, service: JobService, events: EventSource | None, trail: AuditTrail | None = None
    ) -> None:
        self._inner = service
        self._trail = trail or AuditTrail()
        self._events = events

    @property
    def _service(self) -> TenantScope:
        """The calling principal's view of the jobs (set by the AuthInterceptor)."""
        return TenantScope(self._inner, current_principal(), self._trail)

    def SubmitJob(self, request: pb.SubmitJobRequest, context: grpc.ServicerContext) -> pb.Job:
        jobs = self._service
        tenant = jobs.principal.tenant
        return job_to_pb(_call(context, lambda: jobs.submit(spec_from_pb(request, tenant))))

    def GetJob(self, request: pb.GetJobRequest, context: grpc.ServicerContext) -> pb.Job:
        jobs = self._service
        job = _call(context, lambda: jobs.get(request.id))
        return job_to_pb(job, jobs.why(job.id))

    def ListJobs(
        self, request: pb.ListJobsRequest, context: grpc.ServicerContext
    ) -> pb.ListJobsResponse:
        service = self._service
        jobs = _call(context, lambda: service.list_jobs(request.state or None))
        if request.tenant:
            jobs = [j for j in jobs if j.spec.tenant == request.tenant]
        return pb.ListJobsResponse(jobs=[job_to_pb(j, service.why(j.id)) for j in jobs])

    def CancelJob(self, request: pb.CancelJobRequest, context: grpc.ServicerContext) -> pb.Job:
        jobs = self._service
        return job_to_pb(_call(context, lambda: jobs.cancel(request.id)))

    def KillJob(self, request: pb.KillJobRequest, context: grpc.ServicerContext) -> pb.Job:
        jobs = self._service
        return job_to_pb(_call(context, lambda: jobs.kill(request.id)))

    def GetLogs(
        self, request: pb.GetLogsRequest, context: grpc.ServicerContext
    ) -> pb.GetLogsResponse:
        attempt = request.attempt or None
        tail = request.tail_bytes or 65536
        jobs = self._service
        text = _call(context, lambda: jobs.logs(request.id, attempt, tail, request.rank))
        return pb.GetLogsResponse(data=text.encode())

    def SubmitArray(
        self, request: pb.SubmitArrayRequest, context: grpc.ServicerContext
    ) -> pb.JobArray:
        jobs = self._service
        job, tenant = request.job, jobs.principal.tenant
        made = _call(context, lambda: jobs.submit_array(spec_from_pb(job, tenant), request.array))
        return array_to_pb(made)

    def GetArray(self, request: pb.GetArrayRequest, context: grpc.ServicerContext) -> pb.JobArray:
        jobs = self._service
        return array_to_pb(_call(context, lambda: jobs.get_array(request.id)))

    def CancelArray(
        self, request: pb.CancelArrayRequest, context: grpc.ServicerContext
    ) -> pb.JobArray:
        jobs = self._service
        return array_to_pb(_call(context, lambda: jobs.cancel_array(request.id)))

    def WatchJobs(
        self, request: pb.WatchJobsRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.JobEvent]:
        source = self._events
        if source is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "no event source configured")
            raise AssertionError("unreachable")  # pragma: no cover
        scope = self._service
        if request.job_id:
            _call(context, lambda: scope.get(request.job_id))  # NOT_FOUND early
        with source.subscribe() as events:
            while context.is_active():
                try:
                    event: DomainEvent | None = events.get(timeout=WATCH_POLL_S)
                except queue.Empty:
                    continue
                if event is None:
                    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "watcher fell behind")
                job_id = getattr(event, "job_id", "")
                if request.job_id and job_id != request.job_id:
                    continue
                try:
                    job = scope.get(job_id)
                except NotFound:  # gone, or another tenant's
                    continue
                yield pb.JobEvent(type=type(event).__name__, job_id=job_id, job=job_to_pb(job))


class ClusterServicer(pb_grpc.ClusterServiceServicer):
    def __init__(self, service: JobService) -> None:
        self._inner = service

    def ListGpus(
        self, request: pb.ListGpusRequest, context: grpc.ServicerContext
    ) -> pb.ListGpusResponse:
        jobs = TenantScope(self._inner, current_principal(), AuditTrail())
        return pb.ListGpusResponse(gpus=[gpu_to_pb(g) for g in _call(context, jobs.gpus)])

    def GetStatus(
        self, request: pb.GetStatusRequest, context: grpc.ServicerContext
    ) -> pb.ClusterStatus:
        jobs = TenantScope(self._inner, current_principal(), AuditTrail())
        return status_to_pb(_call(context, jobs.status))


class GrpcServer:
    """Owns a grpc.Server bound to `host:port` (port 0 = any free port; see `.port`)."""

    def __init__(
        self,
        service: JobService,
        host: str = "127.0.0.1",
        port: int = 50051,
        events: EventSource | None = None,
        max_workers: int = 32,
        tracer_provider: TracerProvider | None = None,
        api_metrics: ApiMetrics | None = None,
        admin: AdminService | None = None,
        access: AccessService | None = None,
        trail: AuditTrail | None = None,
        tls: TlsFiles | None = None,
        run_as: RunAsAdmin | None = None,
        serving: ServicesApi | None = None,
        max_message_bytes: int = 1 << 20,
        unix_socket: str | None = None,
        submit_socket: str | None = None,
    ) -> None:
        """For API workers: `unix_socket`, listen there instead of `host:port`;
        `submit_socket`, take SubmitJob batches there (front_core, front_link)."""
        access = access or OpenAccess()
        trail = trail or AuditTrail()
        interceptors: list[grpc.ServerInterceptor] = []
        if api_metrics is not None:  # outermost: the latency includes tracing and auth
            interceptors.append(MetricsInterceptor(api_metrics))
        if tracer_provider is not None:
            interceptors.append(TracingInterceptor(tracer_provider))
        interceptors.append(AuthInterceptor(access, certificates=tls is not None))
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers),
            interceptors=interceptors,
            # a larger request is RESOURCE_EXHAUSTED before any handler sees it
            options=[NO_PORT_REUSE, ("grpc.max_receive_message_length", max_message_bytes)],
        )
        jobs = JobServicer(service, events, trail)
        pb_grpc.add_JobServiceServicer_to_server(jobs, self._server)  # type: ignore[no-untyped-call]
        self._front: tuple[SubmitItems, BatchListener] | None = None
        if submit_socket is not None:
            items = SubmitItems(
                jobs.SubmitJob, pb.SubmitJobRequest.FromString, _serialize, interceptors
            )
            self._front = (items, BatchListener(submit_socket, items.batch))
        pb_grpc.add_ClusterServiceServicer_to_server(  # type: ignore[no-untyped-call]
            ClusterServicer(service), self._server
        )
        services = ["JobService", "ClusterService"]
        if admin is not None:
            pb_grpc.add_AdminServiceServicer_to_server(  # type: ignore[no-untyped-call]
                AdminServicer(service, admin, access, trail), self._server
            )
            services.append("AdminService")
        if run_as is not None:
            pb_grpc.add_RunAsServiceServicer_to_server(  # type: ignore[no-untyped-call]
                RunAsServicer(run_as, _call), self._server
            )
            services.append("RunAsService")
        if serving is not None:  # services with replicas (grpc/services.py)
            from gpu_platform.adapters.inbound.grpc.services import ServingServicer

            pb_grpc.add_ServingServiceServicer_to_server(  # type: ignore[no-untyped-call]
                ServingServicer(serving), self._server
            )
            services.append("ServingService")
        self._services = tuple(f"gpu_platform.v1.{name}" for name in services)
        self._health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        names = (*self._services, health.SERVICE_NAME, reflection.SERVICE_NAME)
        reflection.enable_server_reflection(names, self._server)
        if unix_socket is not None:  # the API workers serve host:port (TLS theirs)
            bind_port(self._server, f"unix:{unix_socket}", "gRPC API (for its workers)")
            os.chmod(unix_socket, 0o600)  # this account only (the data dir is already)
            self.port, self.address = 0, f"unix:{unix_socket}"
            return
        creds = None if tls is None else tls.grpc_server_credentials()
        self.port = bind_port(self._server, f"{host}:{port}", "gRPC API", creds)
        self.address = f"{host}:{self.port}"

    def start(self) -> None:
        self._server.start()
        for name in ("", *self._services):
            self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("gRPC listening", address=self.address)

    @property
    def submit_items(self) -> SubmitItems | None:
        """What answers the API workers' batches of submits (None without workers)."""
        return None if self._front is None else self._front[0]

    def stop(self, grace_s: float = 5.0) -> None:
        self._health.enter_graceful_shutdown()
        self._server.stop(grace_s).wait()
        if self._front is not None:
            items, listener = self._front
            listener.close()
            items.close()


def _serialize(message: Any) -> bytes:
    return bytes(message.SerializeToString())
