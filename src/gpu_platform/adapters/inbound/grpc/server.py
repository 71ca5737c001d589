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

import queue
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any, Protocol, TypeVar

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from opentelemetry.trace import TracerProvider

from gpu_platform.adapters.grpc_bind import NO_PORT_REUSE, bind_port
from gpu_platform.adapters.inbound.grpc.agent_service import LEADER_METADATA
from gpu_platform.adapters.inbound.grpc.auth import (
    AuthInterceptor,
    abort_access,
    current_principal,
)
from gpu_platform.adapters.inbound.grpc.convert import (
    array_to_pb,
    gpu_to_pb,
    job_to_pb,
    spec_from_pb,
    status_to_pb,
)
from gpu_platform.adapters.inbound.grpc.interceptors import MetricsInterceptor, TracingInterceptor
from gpu_platform.adapters.inbound.grpc.run_as import RunAsServicer
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.adapters.tls import TlsFiles
from gpu_platform.application.auth import OpenAccess
from gpu_platform.application.auth_scope import AuditTrail, TenantScope
from gpu_platform.application.consistency import LeaderElsewhere, stale_reads
from gpu_platform.application.raft_node import NodeStopped
from gpu_platform.domain.errors import (
    Conflict,
    DomainError,
    IllegalTransition,
    InvalidRequest,
    NotFound,
)
from gpu_platform.domain.events import DomainEvent
from gpu_platform.domain.model.tenancy import AccessError, Permission, Role
from gpu_platform.ports.inbound.access import AccessService, TokenInfo
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


READ_CONSISTENCY_METADATA = "gpu-platform-read-consistency"  # "stale": a follower answers


def _call(context: grpc.ServicerContext, fn: Callable[[], T]) -> T:
    metadata = dict(context.invocation_metadata() or ())
    stale = str(metadata.get(READ_CONSISTENCY_METADATA, "")).lower() == "stale"
    try:
        with stale_reads(stale):
            return fn()
    except AccessError as exc:
        abort_access(context, exc)
    except LeaderElsewhere as exc:
        context.set_trailing_metadata(((LEADER_METADATA, exc.grpc_address),))
        context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
    except NodeStopped:
        context.abort(grpc.StatusCode.UNAVAILABLE, "server is shutting down")
    except InvalidRequest as exc:
        context.set_trailing_metadata((("field", exc.field),))
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    except NotFound as exc:
        context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
    except (Conflict, IllegalTransition) as exc:
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
    except (DomainError, ValueError) as exc:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    raise AssertionError("unreachable")  # pragma: no cover


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


def _token_pb(t: TokenInfo, secret: str = "") -> pb.Token:
    msg = pb.Token(
        token_id=t.token_id,
        name=t.name,
        tenant=t.tenant,
        role=str(t.role),
        created_at=t.created_at,
        secret=secret,
    )
    if t.revoked_at is not None:
        msg.revoked_at = t.revoked_at
    return msg


_ACTIONS = ("drain", "offline", "online")


class AdminServicer(pb_grpc.AdminServiceServicer):
    """The AdminService RPCs; the same rules as REST's admin and access routes."""

    def __init__(
        self, service: JobService, admin: AdminService, access: AccessService, trail: AuditTrail
    ) -> None:
        self._service = service
        self._admin = admin
        self._access = access
        self._trail = trail

    def _operator(
        self, context: grpc.ServicerContext, action: str, allowed: tuple[str, ...] = _ACTIONS
    ) -> str:
        who = current_principal()
        if action not in allowed:
            context.set_trailing_metadata((("field", "action"),))
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"action: one of {_ACTIONS}")
        if not who.may(Permission.HARDWARE_ADMIN):
            self._trail.record(who, "hardware.action", "-", f"refused: role {who.role}")
        _call(context, lambda: who.require(Permission.HARDWARE_ADMIN))
        return who.name

    def GpuAction(self, request: pb.GpuActionRequest, context: grpc.ServicerContext) -> pb.Gpu:
        actor = self._operator(context, request.action)

        def act() -> pb.Gpu:
            self._admin.gpu_action(
                request.node,
                request.index,
                request.action,  # type: ignore[arg-type]  # checked by _operator
                reason=request.reason,
                actor=actor,
                force=request.force,
            )
            for info in self._service.gpus():
                if info.gpu.node == request.node and info.gpu.index == request.index:
                    return gpu_to_pb(info)
            raise NotFound("gpu", f"{request.node}:{request.index}")  # pragma: no cover

        return _call(context, act)

    def NodeAction(self, request: pb.NodeActionRequest, context: grpc.ServicerContext) -> pb.Node:
        actor = self._operator(context, request.action)

        def act() -> pb.Node:
            self._admin.node_action(
                request.node,
                request.action,  # type: ignore[arg-type]  # checked by _operator
                reason=request.reason,
                actor=actor,
                force=request.force,
            )
            n = next(n for n in self._admin.nodes() if n.name == request.node)
            return pb.Node(
                name=n.name, state=str(n.state), reason=n.reason, gpus=n.gpus, jobs=n.jobs
            )

        return _call(context, act)

    def RemoveNode(
        self, request: pb.RemoveNodeRequest, context: grpc.ServicerContext
    ) -> pb.RemoveNodeResponse:
        actor = self._operator(context, "remove", ("remove",))

        def act() -> pb.RemoveNodeResponse:
            self._admin.remove_node(request.node, reason=request.reason, actor=actor)
            return pb.RemoveNodeResponse()

        return _call(context, act)

    def ListNodes(
        self, request: pb.ListNodesRequest, context: grpc.ServicerContext
    ) -> pb.ListNodesResponse:
        _call(context, lambda: current_principal().require(Permission.CLUSTER_READ))
        return pb.ListNodesResponse(
            nodes=[
                pb.Node(name=n.name, state=str(n.state), reason=n.reason, gpus=n.gpus, jobs=n.jobs)
                for n in self._admin.nodes()
            ]
        )

    def ListAudit(
        self, request: pb.AuditRequest, context: grpc.ServicerContext
    ) -> pb.AuditResponse:
        _call(context, lambda: current_principal().require(Permission.AUDIT_READ))
        if request.limit < 0 or request.limit > 10000:
            context.set_trailing_metadata((("field", "limit"),))
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "limit: 0..10000")
        records = self._admin.audit(request.limit or 100)
        return pb.AuditResponse(
            entries=[
                pb.AuditEntry(
                    at=a.at,
                    actor=a.actor,
                    action=a.action,
                    target=a.target,
                    reason=a.reason,
                    outcome=a.outcome,
                )
                for a in records
            ]
        )

    def CreateTenant(
        self, request: pb.CreateTenantRequest, context: grpc.ServicerContext
    ) -> pb.Tenant:
        t = _call(context, lambda: self._access.create_tenant(current_principal(), request.name))
        return pb.Tenant(name=t.name, created_at=t.created_at)

    def ListTenants(
        self, request: pb.ListTenantsRequest, context: grpc.ServicerContext
    ) -> pb.ListTenantsResponse:
        found = _call(context, lambda: self._access.tenants(current_principal()))
        return pb.ListTenantsResponse(
            tenants=[pb.Tenant(name=t.name, created_at=t.created_at) for t in found]
        )

    def CreateToken(
        self, request: pb.CreateTokenRequest, context: grpc.ServicerContext
    ) -> pb.Token:
        who = current_principal()
        if request.role not in {str(r) for r in Role}:
            context.set_trailing_metadata((("field", "role"),))
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "role: admin, operator, user or viewer")
        issued = _call(
            context,
            lambda: self._access.create_token(
                who, request.name, request.tenant, Role(request.role)
            ),
        )
        return _token_pb(issued.info, issued.secret)

    def ListTokens(
        self, request: pb.ListTokensRequest, context: grpc.ServicerContext
    ) -> pb.ListTokensResponse:
        found = _call(context, lambda: self._access.tokens(current_principal()))
        return pb.ListTokensResponse(tokens=[_token_pb(t) for t in found])

    def RevokeToken(
        self, request: pb.RevokeTokenRequest, context: grpc.ServicerContext
    ) -> pb.Token:
        info = _call(
            context, lambda: self._access.revoke_token(current_principal(), request.token_id)
        )
        return _token_pb(info)


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
    ) -> None:
        access = access or OpenAccess()
        trail = trail or AuditTrail()
        interceptors: list[grpc.ServerInterceptor] = []
        if api_metrics is not None:  # outermost: the latency includes tracing and auth
            interceptors.append(MetricsInterceptor(api_metrics))
        if tracer_provider is not None:
            interceptors.append(TracingInterceptor(tracer_provider))
        interceptors.append(AuthInterceptor(access))
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers),
            interceptors=interceptors,
            # a larger request is RESOURCE_EXHAUSTED before any handler sees it
            options=[NO_PORT_REUSE, ("grpc.max_receive_message_length", max_message_bytes)],
        )
        pb_grpc.add_JobServiceServicer_to_server(  # type: ignore[no-untyped-call]
            JobServicer(service, events, trail), self._server
        )
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
        creds = None if tls is None else tls.grpc_server_credentials()
        self.port = bind_port(self._server, f"{host}:{port}", "gRPC API", creds)
        self.address = f"{host}:{self.port}"

    def start(self) -> None:
        self._server.start()
        for name in ("", *self._services):
            self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("gRPC listening", address=self.address)

    def stop(self, grace_s: float = 5.0) -> None:
        self._health.enter_graceful_shutdown()
        self._server.stop(grace_s).wait()
