"""The gRPC server: JobService, ClusterService, grpc.health.v1 and reflection.

Errors map like REST's: InvalidRequest -> INVALID_ARGUMENT ("field: reason"; the field is also
in the `field` trailing-metadata key), NotFound -> NOT_FOUND, Conflict -> FAILED_PRECONDITION,
a malformed request (a JobSpec the domain refuses) -> INVALID_ARGUMENT. Deadlines are the
client's: a unary call past its deadline is cancelled by grpc; WatchJobs ends when the client
goes away or its deadline passes.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any, Protocol, TypeVar

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from opentelemetry.trace import TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gpu_platform.adapters.inbound.grpc.convert import (
    gpu_to_pb,
    job_to_pb,
    spec_from_pb,
    status_to_pb,
)
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.domain.errors import Conflict, DomainError, InvalidRequest, NotFound
from gpu_platform.domain.events import DomainEvent
from gpu_platform.ports.inbound.job_service import JobService
from gpu_platform.ports.outbound.metrics import ApiMetrics

__all__ = ["EventSource", "GrpcServer"]

log = structlog.get_logger(__name__)
T = TypeVar("T")
WATCH_POLL_S = 0.25


class EventSource(Protocol):
    """Where WatchJobs gets live events (the EventHub)."""

    def subscribe(self) -> Any: ...


def _call(context: grpc.ServicerContext, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except InvalidRequest as exc:
        context.set_trailing_metadata((("field", exc.field),))
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    except NotFound as exc:
        context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
    except Conflict as exc:
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
    except (DomainError, ValueError) as exc:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    raise AssertionError("unreachable")  # pragma: no cover


class JobServicer(pb_grpc.JobServiceServicer):
    def __init__(self, service: JobService, events: EventSource | None) -> None:
        self._service = service
        self._events = events

    def SubmitJob(self, request: pb.SubmitJobRequest, context: grpc.ServicerContext) -> pb.Job:
        return job_to_pb(_call(context, lambda: self._service.submit(spec_from_pb(request))))

    def GetJob(self, request: pb.GetJobRequest, context: grpc.ServicerContext) -> pb.Job:
        return job_to_pb(_call(context, lambda: self._service.get(request.id)))

    def ListJobs(
        self, request: pb.ListJobsRequest, context: grpc.ServicerContext
    ) -> pb.ListJobsResponse:
        jobs = _call(context, lambda: self._service.list_jobs(request.state or None))
        return pb.ListJobsResponse(jobs=[job_to_pb(j) for j in jobs])

    def CancelJob(self, request: pb.CancelJobRequest, context: grpc.ServicerContext) -> pb.Job:
        return job_to_pb(_call(context, lambda: self._service.cancel(request.id)))

    def GetLogs(
        self, request: pb.GetLogsRequest, context: grpc.ServicerContext
    ) -> pb.GetLogsResponse:
        attempt = request.attempt or None
        tail = request.tail_bytes or 65536
        text = _call(context, lambda: self._service.logs(request.id, attempt, tail, request.rank))
        return pb.GetLogsResponse(data=text.encode())

    def WatchJobs(
        self, request: pb.WatchJobsRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.JobEvent]:
        source = self._events
        if source is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "no event source configured")
            raise AssertionError("unreachable")  # pragma: no cover
        if request.job_id:
            _call(context, lambda: self._service.get(request.job_id))  # NOT_FOUND early
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
                    job = self._service.get(job_id)
                except NotFound:
                    continue
                yield pb.JobEvent(type=type(event).__name__, job_id=job_id, job=job_to_pb(job))


class ClusterServicer(pb_grpc.ClusterServiceServicer):
    def __init__(self, service: JobService) -> None:
        self._service = service

    def ListGpus(
        self, request: pb.ListGpusRequest, context: grpc.ServicerContext
    ) -> pb.ListGpusResponse:
        return pb.ListGpusResponse(gpus=[gpu_to_pb(g) for g in self._service.gpus()])

    def GetStatus(
        self, request: pb.GetStatusRequest, context: grpc.ServicerContext
    ) -> pb.ClusterStatus:
        return status_to_pb(self._service.status())


class _TracingInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    """One OpenTelemetry span per unary RPC, named after its method
    (e.g. /gpu_platform.v1.JobService/GetJob); a `traceparent` in the call's metadata makes it
    a child of the caller's span."""

    def __init__(self, tracer_provider: TracerProvider) -> None:
        self._tracer = tracer_provider.get_tracer("gpu_platform.grpc")

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler  # streams are left untraced: a span per event would be noise
        method = handler_call_details.method
        inner = handler.unary_unary

        def traced(request: Any, context: grpc.ServicerContext) -> Any:
            parent = TraceContextTextMapPropagator().extract(dict(context.invocation_metadata()))
            with self._tracer.start_as_current_span(method, context=parent) as span:
                span.set_attribute("rpc.system", "grpc")
                span.set_attribute("rpc.method", method)
                return inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            traced,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


class _MetricsInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    """Reports each unary RPC's latency and status code to ApiMetrics."""

    def __init__(self, metrics: ApiMetrics) -> None:
        self._metrics = metrics

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler  # streams (WatchJobs) last as long as the client wants
        method = handler_call_details.method
        inner = handler.unary_unary

        def measured(request: Any, context: grpc.ServicerContext) -> Any:
            started, failed = time.perf_counter(), True
            try:
                response = inner(request, context)
                failed = False
                return response
            finally:
                code = context.code() or (grpc.StatusCode.UNKNOWN if failed else grpc.StatusCode.OK)
                name = code.name if isinstance(code, grpc.StatusCode) else str(code)
                self._metrics.grpc_call(method, name, time.perf_counter() - started)

        return grpc.unary_unary_rpc_method_handler(
            measured,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


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
    ) -> None:
        interceptors: list[grpc.ServerInterceptor] = []
        if api_metrics is not None:  # outermost: the latency includes tracing
            interceptors.append(_MetricsInterceptor(api_metrics))
        if tracer_provider is not None:
            interceptors.append(_TracingInterceptor(tracer_provider))
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers), interceptors=interceptors
        )
        pb_grpc.add_JobServiceServicer_to_server(  # type: ignore[no-untyped-call]
            JobServicer(service, events), self._server
        )
        pb_grpc.add_ClusterServiceServicer_to_server(  # type: ignore[no-untyped-call]
            ClusterServicer(service), self._server
        )
        self._health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        names = (
            pb.DESCRIPTOR.services_by_name["JobService"].full_name,
            pb.DESCRIPTOR.services_by_name["ClusterService"].full_name,
            health.SERVICE_NAME,
            reflection.SERVICE_NAME,
        )
        reflection.enable_server_reflection(names, self._server)
        self.port = self._server.add_insecure_port(f"{host}:{port}")
        if self.port == 0:
            raise OSError(f"cannot listen for gRPC on {host}:{port}")
        self.address = f"{host}:{self.port}"

    def start(self) -> None:
        self._server.start()
        for name in ("", "gpu_platform.v1.JobService", "gpu_platform.v1.ClusterService"):
            self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("gRPC listening", address=self.address)

    def stop(self, grace_s: float = 5.0) -> None:
        self._health.enter_graceful_shutdown()
        self._server.stop(grace_s).wait()
