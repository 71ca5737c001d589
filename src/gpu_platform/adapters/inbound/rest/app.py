"""The REST API over the JobService port.

Errors: 422 for bad input (malformed body, or a request that can never be satisfied — `detail`
names the field, FastAPI's shape), 404 for unknown ids, 409 for conflicts (cancelling an ended
job; an operator action the state tables refuse). Admin routes: `rest.admin`. Every request
runs in an OpenTelemetry span when a tracer provider is given (continuing the caller's trace
when the request carries a W3C `traceparent` header), and its latency is reported by route
template when `api_metrics` is given.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from opentelemetry.trace import TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gpu_platform import __version__
from gpu_platform.adapters.inbound.rest.admin import admin_router
from gpu_platform.adapters.inbound.rest.schemas import (
    CONFLICT,
    NOT_FOUND,
    ClusterStatusOut,
    GpuOut,
    JobOut,
    JobSubmit,
    UsageOut,
)
from gpu_platform.domain.errors import Conflict, IllegalTransition, InvalidRequest, NotFound
from gpu_platform.domain.model.job import JobState
from gpu_platform.ports.inbound.admin_service import AdminService
from gpu_platform.ports.inbound.job_service import JobService
from gpu_platform.ports.inbound.usage import UsageQueries
from gpu_platform.ports.outbound.metrics import ApiMetrics

__all__ = ["FOLLOW_POLL_S", "create_app"]


FOLLOW_POLL_S = 0.2


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(InvalidRequest)
    async def _invalid(_: Request, exc: InvalidRequest) -> JSONResponse:
        detail = [{"loc": ["body", exc.field], "msg": exc.reason, "type": "invalid_request"}]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(Conflict)
    async def _conflict(_: Request, exc: Conflict) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=409)

    @app.exception_handler(IllegalTransition)
    async def _illegal(_: Request, exc: IllegalTransition) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=409)


def create_app(
    service: JobService,
    *,
    admin: AdminService | None = None,
    metrics: Callable[[], tuple[bytes, str]] | None = None,
    tracer_provider: TracerProvider | None = None,
    usage: UsageQueries | None = None,
    api_metrics: ApiMetrics | None = None,
) -> FastAPI:
    app = FastAPI(
        title="gpu-platform",
        version=__version__,
        description="Submit, inspect and cancel GPU jobs; inspect GPUs and the cluster.",
    )

    _install_error_handlers(app)

    if tracer_provider is not None:
        tracer = tracer_provider.get_tracer("gpu_platform.rest")

        @app.middleware("http")
        async def _trace(
            request: Request, call_next: Callable[[Request], Awaitable[Response]]
        ) -> Response:
            parent = TraceContextTextMapPropagator().extract(request.headers)
            name = f"{request.method} {request.url.path}"
            with tracer.start_as_current_span(name, context=parent) as span:
                span.set_attribute("http.request.method", request.method)
                span.set_attribute("url.path", request.url.path)
                response = await call_next(request)
                span.set_attribute("http.response.status_code", response.status_code)
                return response

    if api_metrics is not None:
        observe = api_metrics

        @app.middleware("http")
        async def _measure(
            request: Request, call_next: Callable[[Request], Awaitable[Response]]
        ) -> Response:
            started, status = time.perf_counter(), 500
            try:
                response = await call_next(request)
                status = response.status_code
                return response
            finally:  # streamed bodies: the time to the response headers
                # the template of the route the router chose (it sets scope["route"])
                route = getattr(request.scope.get("route"), "path", None) or "unmatched"
                observe.http_request(request.method, route, status, time.perf_counter() - started)

    @app.post("/v1/jobs", status_code=201, response_model=JobOut)
    async def submit(body: JobSubmit) -> JobOut:
        job = await run_in_threadpool(service.submit, body.to_spec())
        return JobOut.of(job)

    @app.get("/v1/jobs", response_model=list[JobOut])
    async def list_jobs(state: JobState | None = None) -> list[JobOut]:
        jobs = await run_in_threadpool(service.list_jobs, None if state is None else str(state))
        return [JobOut.of(j) for j in jobs]

    @app.get("/v1/jobs/{job_id}", response_model=JobOut, responses=NOT_FOUND)
    async def get_job(job_id: str) -> JobOut:
        return JobOut.of(await run_in_threadpool(service.get, job_id))

    @app.post(
        "/v1/jobs/{job_id}/cancel", response_model=JobOut, responses={**NOT_FOUND, **CONFLICT}
    )
    async def cancel(job_id: str) -> JobOut:
        return JobOut.of(await run_in_threadpool(service.cancel, job_id))

    @app.get(
        "/v1/jobs/{job_id}/logs",
        response_class=PlainTextResponse,
        response_model=None,
        responses={404: {**NOT_FOUND[404], "content": {"application/json": {}}}},
    )
    async def logs(
        job_id: str,
        attempt: int | None = Query(None, ge=1),
        tail_bytes: int = Query(65536, ge=1, le=16 << 20),
        follow: bool = Query(False, description="stream until the attempt has ended"),
        rank: int = Query(0, ge=0, description="which task of a gang"),
    ) -> str | StreamingResponse:
        if not follow:
            return await run_in_threadpool(service.logs, job_id, attempt, tail_bytes, rank)
        job = await run_in_threadpool(service.get, job_id)
        which = attempt or job.attempt
        if which == 0:  # not started yet: wait for the first attempt (or the end)
            while which == 0 and not job.terminal:
                await asyncio.sleep(FOLLOW_POLL_S)
                job = await run_in_threadpool(service.get, job_id)
                which = job.attempt
            if which == 0:
                return ""
        await run_in_threadpool(service.log_from, job_id, which, 0, 0, rank)  # 404 early

        async def stream() -> AsyncIterator[bytes]:
            offset = 0
            while True:
                chunk, live = await run_in_threadpool(
                    service.log_from, job_id, which, offset, 65536, rank
                )
                if chunk:
                    offset += len(chunk)
                    yield chunk
                elif not live:
                    return
                else:
                    await asyncio.sleep(FOLLOW_POLL_S)

        return StreamingResponse(stream(), media_type="text/plain")

    @app.get("/v1/gpus", response_model=list[GpuOut])
    async def gpus() -> list[GpuOut]:
        return [GpuOut.of(g) for g in await run_in_threadpool(service.gpus)]

    @app.get("/v1/status", response_model=ClusterStatusOut)
    async def status() -> ClusterStatusOut:
        return ClusterStatusOut.of(await run_in_threadpool(service.status))

    if usage is not None:
        accounting = usage

        @app.get("/v1/usage", response_model=UsageOut)
        async def get_usage(
            tenant: str | None = None,
            since: float | None = Query(None, description="Unix seconds; default: all time"),
            until: float | None = Query(None, description="Unix seconds; default: now"),
        ) -> UsageOut:
            return UsageOut.of(await run_in_threadpool(accounting.usage, tenant, since, until))

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        s = await run_in_threadpool(service.status)
        return {"status": "ok", "inventory": s.inventory_source, "simulated": s.simulated}

    if admin is not None:
        app.include_router(admin_router(service, admin))

    if metrics is not None:
        render = metrics

        @app.get("/metrics", include_in_schema=False)
        async def prometheus() -> Response:
            body, content_type = await run_in_threadpool(render)
            return Response(body, media_type=content_type)

    return app
