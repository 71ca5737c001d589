"""The dashboard's pages and the fragments the live stream refreshes.

GET /                      cluster: GPU grid by state, nodes, topology, servers, agents
GET /queue?state=&tenant=  the queue in scheduling order, then running and finished jobs
GET /jobs/{id}             one job: placement, attempts, transitions, its log (followed)
GET /tenants?hours=        quotas, use, borrowing, GPU-hours over time (an SVG chart)
GET /services              services and their replicas (none on a server without them)
GET /admin                 drain/offline/online GPUs and nodes, cancel jobs, the audit log
GET /ui/fragments/{gpus,servers,queue,jobs/{id},audit}   the same parts, for htmx swaps
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

from gpu_platform.adapters.inbound.web.chart import svg_chart, usage_buckets
from gpu_platform.adapters.inbound.web.site import Site, Visitor
from gpu_platform.adapters.inbound.web.views import (
    STATE_ORDER,
    gpu_counts,
    node_grids,
    queue_rows,
    tenant_rows,
    topology_table,
)
from gpu_platform.domain.errors import InvalidRequest, NotFound
from gpu_platform.domain.model.job import JobState
from gpu_platform.domain.model.tenancy import Forbidden, Permission

__all__ = ["pages_router"]

JOB_STATES = tuple(str(s) for s in JobState)
HOURS = (1, 6, 24, 168)


def _gpus(site: Site, v: Visitor) -> dict[str, Any]:
    gpus = v.jobs.gpus()
    jobs = {}
    for job_id in {g.job_id for g in gpus if g.job_id}:  # the holders only, not every job
        try:
            jobs[job_id] = v.jobs.get(job_id)
        except NotFound:  # ended since, or another tenant's
            continue
    nodes = site.admin.nodes() if site.admin is not None else []
    readings = {}
    if site.telemetry is not None:
        snap = site.telemetry()
        readings = {(snap.node, r.index): r for r in snap.gpus}
    return {
        "counts": gpu_counts(gpus),
        "grids": node_grids(gpus, nodes, jobs, readings),
        "status": v.jobs.status(),
    }


def _servers(site: Site) -> dict[str, Any]:
    return {"cluster": None if site.admin is None else site.admin.cluster()}


def _queue(v: Visitor, state: str | None, tenant: str | None) -> dict[str, Any]:
    if state is not None and state not in JOB_STATES:
        raise InvalidRequest("state", f"{state!r}: one of {', '.join(JOB_STATES)}")
    jobs = v.jobs.list_jobs()
    why = {j.id: v.jobs.why(j.id) for j in jobs if j.state is JobState.QUEUED}
    tenants = sorted({j.spec.tenant for j in jobs})
    return {
        "rows": queue_rows(jobs, why, state, tenant),
        "state": state or "",
        "tenant": tenant or "",
        "tenants": tenants,
        "states": JOB_STATES,
    }


def _job(v: Visitor, job_id: str) -> dict[str, Any]:
    job = v.jobs.get(job_id)
    return {"job": job, "why": v.jobs.why(job_id), "may_cancel": v.may(Permission.JOBS_WRITE)}


def _admin(site: Site, v: Visitor) -> dict[str, Any]:
    if site.admin is None or not v.may(Permission.HARDWARE_ADMIN):
        raise Forbidden(f"role {v.who.role} may not {Permission.HARDWARE_ADMIN}")
    gpus = v.jobs.gpus()
    active = [j for j in v.jobs.list_jobs() if not j.terminal]
    return {
        "gpus": sorted(gpus, key=lambda g: (g.gpu.node, g.gpu.index)),
        "nodes": site.admin.nodes(),
        "active": active,
        "audit": list(reversed(site.admin.audit(25))),
    }


def pages_router(site: Site) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    async def cluster(request: Request) -> Response:
        async def build(v: Visitor) -> Response:
            def load() -> dict[str, Any]:
                topo = []
                if site.topology is not None and site.admin is not None:
                    for n in site.admin.nodes():
                        m = site.topology(n.name)
                        if m is not None:
                            topo.append(topology_table(m))
                return {**_gpus(site, v), **_servers(site), "topology": topo}

            ctx = await run_in_threadpool(load)
            return site.render("cluster.html", **site.base(v, "cluster"), **ctx, order=STATE_ORDER)

        return await site.guard(request, build)

    @router.get("/ui/fragments/gpus")
    async def gpus_fragment(request: Request) -> Response:
        async def build(v: Visitor) -> Response:
            ctx = await run_in_threadpool(_gpus, site, v)
            return site.render("_gpus.html", **ctx, order=STATE_ORDER)

        return await site.guard(request, build, page=False)

    @router.get("/ui/fragments/servers")
    async def servers_fragment(request: Request) -> Response:
        async def build(v: Visitor) -> Response:
            return site.render("_servers.html", **await run_in_threadpool(_servers, site))

        return await site.guard(request, build, page=False)

    @router.get("/queue")
    async def queue(
        request: Request,
        state: str | None = Query(None, max_length=16),
        tenant: str | None = Query(None, max_length=64),
    ) -> Response:
        async def build(v: Visitor) -> Response:
            ctx = await run_in_threadpool(_queue, v, state or None, tenant or None)
            return site.render("queue.html", **site.base(v, "queue"), **ctx)

        return await site.guard(request, build)

    @router.get("/ui/fragments/queue")
    async def queue_fragment(
        request: Request,
        state: str | None = Query(None, max_length=16),
        tenant: str | None = Query(None, max_length=64),
    ) -> Response:
        async def build(v: Visitor) -> Response:
            ctx = await run_in_threadpool(_queue, v, state or None, tenant or None)
            return site.render("_queue.html", **ctx)

        return await site.guard(request, build, page=False)

    @router.get("/jobs/{job_id}")
    async def job(request: Request, job_id: str) -> Response:
        async def build(v: Visitor) -> Response:
            ctx = await run_in_threadpool(_job, v, job_id)
            return site.render("job.html", **site.base(v, "queue"), **ctx)

        return await site.guard(request, build)

    @router.get("/ui/fragments/jobs/{job_id}")
    async def job_fragment(request: Request, job_id: str) -> Response:
        async def build(v: Visitor) -> Response:
            ctx = await run_in_threadpool(_job, v, job_id)
            return site.render("_job.html", **ctx, csrf=v.session.csrf)

        return await site.guard(request, build, page=False)

    @router.get("/tenants")
    async def tenants(request: Request, hours: int = Query(24)) -> Response:
        async def build(v: Visitor) -> Response:
            if hours not in HOURS:
                raise InvalidRequest("hours", f"{hours}: one of {', '.join(map(str, HOURS))}")

            def load() -> dict[str, Any]:
                jobs = v.jobs.list_jobs()
                quotas = site.admin.quotas() if site.admin is not None else {}
                mine = None if v.may(Permission.JOBS_ANY_TENANT) else v.who.tenant
                if mine is not None:
                    quotas = {t: q for t, q in quotas.items() if t == mine}
                if site.usage is None:
                    return {"rows": tenant_rows(quotas, jobs, {}), "chart": None}
                usage = site.usage

                def window(since: float, until: float) -> dict[str, float]:
                    return usage.usage(mine, since, until).gpu_hours_by_tenant

                total = usage.usage(mine).gpu_hours_by_tenant
                buckets = usage_buckets(window, hours)
                title = f"GPU-hours per {hours * 60 / 24:g} min, last {hours} h (UTC)"
                return {
                    "rows": tenant_rows(quotas, jobs, total),
                    "chart": svg_chart(buckets, title, hours),
                }

            ctx = await run_in_threadpool(load)
            return site.render(
                "tenants.html", **site.base(v, "tenants"), **ctx, hours=hours, choices=HOURS
            )

        return await site.guard(request, build)

    @router.get("/services")
    async def services(request: Request) -> Response:
        async def build(v: Visitor) -> Response:
            found = None
            if site.services is not None:
                tenant = None if v.may(Permission.JOBS_ANY_TENANT) else v.who.tenant
                found = await run_in_threadpool(site.services.list_services, tenant)
            return site.render("services.html", **site.base(v, "services"), services=found)

        return await site.guard(request, build)

    @router.get("/admin")
    async def admin(request: Request) -> Response:
        async def build(v: Visitor) -> Response:
            ctx = await run_in_threadpool(_admin, site, v)
            return site.render("admin.html", **site.base(v, "admin"), **ctx)

        return await site.guard(request, build)

    @router.get("/ui/fragments/audit")
    async def audit_fragment(request: Request) -> Response:
        async def build(v: Visitor) -> Response:
            ctx = await run_in_threadpool(_admin, site, v)
            return site.render("_audit.html", audit=ctx["audit"])

        return await site.guard(request, build, page=False)

    return router
