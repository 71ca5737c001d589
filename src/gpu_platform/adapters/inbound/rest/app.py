"""The REST API over the JobService port.

Errors are RFC 7807 problem details (`rest.problems`): 401 no/bad token, 403 role, 404
unknown id (or another tenant's job), 409 conflicts, 422 bad input naming the field, 429 rate or
admission limits with Retry-After. Authentication and tenant scoping: `rest.auth`; admin routes:
`rest.admin`. Every request runs in an OpenTelemetry span when a tracer provider is given, and its
latency is reported by route template when `api_metrics` is given.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any, TypeVar

from fastapi import Depends, FastAPI, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse, StreamingResponse
from opentelemetry.trace import TracerProvider

from gpu_platform import __version__
from gpu_platform.adapters.inbound.rest.admin import admin_router
from gpu_platform.adapters.inbound.rest.auth import Auth, access_router
from gpu_platform.adapters.inbound.rest.body_limit import DEFAULT_MAX_REQUEST_BYTES, BodyLimit
from gpu_platform.adapters.inbound.rest.fast_submit import install_fast_submit
from gpu_platform.adapters.inbound.rest.follow import FOLLOW_POLL_S, FollowCount, client_gone
from gpu_platform.adapters.inbound.rest.metrics_auth import metrics_scraper
from gpu_platform.adapters.inbound.rest.observe import MeasureRequests, TraceRequests
from gpu_platform.adapters.inbound.rest.problems import (
    COMMON_ERRORS,
    CONFLICT,
    NOT_FOUND,
    install_problem_handlers,
    problem_openapi,
)
from gpu_platform.adapters.inbound.rest.run_as import run_as_router
from gpu_platform.adapters.inbound.rest.schemas import (
    ArrayOut,
    ArraySubmit,
    ClusterStatusOut,
    GpuOut,
    JobOut,
    JobSubmit,
    UsageOut,
)
from gpu_platform.adapters.inbound.rest.services import services_router
from gpu_platform.application.auth import OpenAccess
from gpu_platform.application.auth_scope import AuditTrail, TenantScope
from gpu_platform.application.consistency import stale_reads
from gpu_platform.domain.model.job import CLIENT_TOKEN_PATTERN, JobState
from gpu_platform.domain.model.tenancy import Forbidden, Permission, Principal
from gpu_platform.ports.inbound.access import AccessService
from gpu_platform.ports.inbound.admin_service import AdminService
from gpu_platform.ports.inbound.job_service import JobService
from gpu_platform.ports.inbound.run_as import RunAsAdmin
from gpu_platform.ports.inbound.services import ServicesApi
from gpu_platform.ports.inbound.usage import UsageQueries
from gpu_platform.ports.outbound.metrics import ApiMetrics

__all__ = ["FOLLOW_POLL_S", "create_app"]


T = TypeVar("T")


async def _anyone() -> None:
    """`metrics_auth = none`: the scrape needs no token."""


class ReadConsistency:
    """ASGI middleware: `X-Read-Consistency: stale` lets a follower answer reads from its own
    replica (possibly stale) instead of sending the client to the leader."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        stale = False
        if scope["type"] == "http":
            for name, value in scope.get("headers", ()):
                if name == b"x-read-consistency":
                    stale = value.strip().lower() == b"stale"
        with stale_reads(stale):
            await self.app(scope, receive, send)


def create_app(
    service: JobService,
    *,
    admin: AdminService | None = None,
    metrics: Callable[[], tuple[bytes, str]] | None = None,
    tracer_provider: TracerProvider | None = None,
    usage: UsageQueries | None = None,
    api_metrics: ApiMetrics | None = None,
    access: AccessService | None = None,
    trail: AuditTrail | None = None,
    run_as: RunAsAdmin | None = None,
    services: ServicesApi | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    metrics_auth: str = "none",
    fast_submit: bool = True,
) -> FastAPI:
    app = FastAPI(
        title="gpu-platform",
        version=__version__,
        description="Submit, inspect and cancel GPU jobs; inspect GPUs and the cluster; "
        "operate GPUs and nodes; manage tenants and tokens.",
        responses=COMMON_ERRORS,
    )
    install_problem_handlers(app)
    problem_openapi(app)
    app.state.follows = FollowCount()
    app.add_middleware(ReadConsistency)
    app.add_middleware(BodyLimit, max_bytes=max_request_bytes)
    auth = Auth(access or OpenAccess(), service, trail or AuditTrail())

    # plain ASGI (not `@app.middleware`): no task and stream hop per request (issue 21)
    if tracer_provider is not None:
        tracer = tracer_provider.get_tracer("gpu_platform.rest")
        app.add_middleware(TraceRequests, tracer=tracer)
    if api_metrics is not None:
        app.add_middleware(MeasureRequests, observe=api_metrics)

    @app.post("/v1/jobs", status_code=201, response_model=JobOut, responses=CONFLICT)
    async def submit(
        body: JobSubmit,
        jobs: TenantScope = Depends(auth.scope),
        idempotency_key: str | None = Header(
            None,
            alias="Idempotency-Key",
            pattern=CLIENT_TOKEN_PATTERN,
            description="one intended submission: a retry with the same key returns the same job",
        ),
    ) -> JobOut:
        spec = body.to_spec(default_tenant=jobs.principal.tenant)
        if idempotency_key is not None:
            spec = replace(spec, client_token=idempotency_key)
        return JobOut.of(await run_in_threadpool(jobs.submit, spec))

    if fast_submit:  # the plain case without FastAPI's per-request work (issue 21)
        app.state.fast_submit = install_fast_submit(app, auth)

    @app.post("/v1/arrays", status_code=201, response_model=ArrayOut)
    async def submit_array(body: ArraySubmit, jobs: TenantScope = Depends(auth.scope)) -> ArrayOut:
        """A job array: one job per index (ids `<array id>_<index>`), created at once; each
        task sees ARRAY_TASK_ID and SLURM_ARRAY_TASK_ID. 422 naming `array` if malformed."""
        spec = body.to_spec(default_tenant=jobs.principal.tenant)
        return ArrayOut.of(await run_in_threadpool(jobs.submit_array, spec, body.array))

    @app.get("/v1/arrays/{array_id}", response_model=ArrayOut, responses=NOT_FOUND)
    async def get_array(array_id: str, jobs: TenantScope = Depends(auth.scope)) -> ArrayOut:
        return ArrayOut.of(await run_in_threadpool(jobs.get_array, array_id))

    @app.post("/v1/arrays/{array_id}/cancel", response_model=ArrayOut, responses=NOT_FOUND)
    async def cancel_array(array_id: str, jobs: TenantScope = Depends(auth.scope)) -> ArrayOut:
        """Cancel every task that has not ended (one task: /v1/jobs/{id}_{index}/cancel)."""
        return ArrayOut.of(await run_in_threadpool(jobs.cancel_array, array_id))

    @app.get("/v1/jobs", response_model=list[JobOut])
    async def list_jobs(
        state: JobState | None = None,
        tenant: str | None = Query(None, max_length=64, description="only this tenant's jobs"),
        offset: int = Query(0, ge=0, le=1 << 30, description="skip this many (oldest first)"),
        limit: int | None = Query(None, ge=1, le=100000, description="at most this many"),
        jobs: TenantScope = Depends(auth.scope),
    ) -> list[JobOut]:
        found = await run_in_threadpool(jobs.list_jobs, None if state is None else str(state))
        if tenant is not None:
            found = [j for j in found if j.spec.tenant == tenant]
        end = None if limit is None else offset + limit
        page = found[offset:end]
        reasons = await run_in_threadpool(lambda: [jobs.why(j.id) for j in page])
        return [JobOut.of(j, why) for j, why in zip(page, reasons, strict=True)]

    @app.get("/v1/jobs/{job_id}", response_model=JobOut, responses=NOT_FOUND)
    async def get_job(job_id: str, jobs: TenantScope = Depends(auth.scope)) -> JobOut:
        job = await run_in_threadpool(jobs.get, job_id)
        return JobOut.of(job, await run_in_threadpool(jobs.why, job_id))

    @app.post(
        "/v1/jobs/{job_id}/cancel", response_model=JobOut, responses={**NOT_FOUND, **CONFLICT}
    )
    async def cancel(job_id: str, jobs: TenantScope = Depends(auth.scope)) -> JobOut:
        """Graceful: SIGTERM, then SIGKILL after the server's stop grace period."""
        return JobOut.of(await run_in_threadpool(jobs.cancel, job_id))

    @app.post("/v1/jobs/{job_id}/kill", response_model=JobOut, responses={**NOT_FOUND, **CONFLICT})
    async def kill(job_id: str, jobs: TenantScope = Depends(auth.scope)) -> JobOut:
        """Immediate: SIGKILL without a grace period."""
        return JobOut.of(await run_in_threadpool(jobs.kill, job_id))

    @app.get(
        "/v1/jobs/{job_id}/logs",
        response_class=PlainTextResponse,
        response_model=None,
        responses=NOT_FOUND,
    )
    async def logs(
        request: Request,
        job_id: str,
        attempt: int | None = Query(None, ge=1),
        tail_bytes: int = Query(65536, ge=1, le=16 << 20),
        follow: bool = Query(False, description="stream until the attempt has ended"),
        rank: int = Query(0, ge=0, description="which task of a gang"),
        jobs: TenantScope = Depends(auth.scope),
    ) -> str | StreamingResponse:
        if not follow:
            return await run_in_threadpool(jobs.logs, job_id, attempt, tail_bytes, rank)
        follows = app.state.follows  # live polling loops; each ends when its client goes
        job = await run_in_threadpool(jobs.get, job_id)
        which = attempt or job.attempt
        if which == 0:  # not started yet: wait for the first attempt (or the end)
            follows.opened()
            try:
                while which == 0 and not job.terminal:
                    if await client_gone(request):
                        return ""
                    job = await run_in_threadpool(jobs.get, job_id)
                    which = job.attempt
            finally:
                follows.closed()
            if which == 0:
                return ""
        await run_in_threadpool(jobs.log_from, job_id, which, 0, 0, rank)  # 404 early

        async def stream() -> AsyncIterator[bytes]:
            offset = 0
            follows.opened()
            try:
                while True:
                    chunk, live = await run_in_threadpool(
                        jobs.log_from, job_id, which, offset, 65536, rank
                    )
                    if chunk:
                        offset += len(chunk)
                        yield chunk
                    elif not live or await client_gone(request):
                        return
            finally:
                follows.closed()

        return StreamingResponse(stream(), media_type="text/plain")

    @app.get("/v1/gpus", response_model=list[GpuOut])
    async def gpus(jobs: TenantScope = Depends(auth.scope)) -> list[GpuOut]:
        return [GpuOut.of(g) for g in await run_in_threadpool(jobs.gpus)]

    @app.get("/v1/status", response_model=ClusterStatusOut)
    async def status(jobs: TenantScope = Depends(auth.scope)) -> ClusterStatusOut:
        return ClusterStatusOut.of(await run_in_threadpool(jobs.status))

    if usage is not None:
        accounting = usage

        @app.get("/v1/usage", response_model=UsageOut)
        async def get_usage(
            tenant: str | None = None,
            since: float | None = Query(None, description="Unix seconds; default: all time"),
            until: float | None = Query(None, description="Unix seconds; default: now"),
            who: Principal = Depends(auth.principal),
        ) -> UsageOut:
            if not who.may(Permission.JOBS_ANY_TENANT):  # users see their own tenant only
                if tenant not in (None, who.tenant):
                    raise Forbidden(f"principal {who.name!r} may only see tenant {who.tenant!r}")
                tenant = who.tenant
            return UsageOut.of(await run_in_threadpool(accounting.usage, tenant, since, until))

    def local(fn: Callable[[], T]) -> Callable[[], T]:
        """Answer from this server's own state: a scrape or a probe is about this server."""

        def run() -> T:
            with stale_reads():
                return fn()

        return run

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        s = await run_in_threadpool(local(service.status))
        return {"status": "ok", "inventory": s.inventory_source, "simulated": s.simulated}

    app.include_router(access_router(auth))
    if run_as is not None:
        app.include_router(run_as_router(auth, run_as))
    if services is not None:
        app.include_router(services_router(services, auth))
    if admin is not None:
        app.include_router(admin_router(service, admin, auth))

    if metrics is not None:
        render = metrics

        scraper = metrics_scraper(auth) if metrics_auth == "token" else _anyone

        @app.get("/metrics", include_in_schema=False)
        async def prometheus(_: object = Depends(scraper)) -> Response:
            body, content_type = await run_in_threadpool(local(render))
            return Response(body, media_type=content_type)

    return app
