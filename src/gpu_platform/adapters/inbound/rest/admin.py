"""Admin routes over the AdminService port: drain/offline/online GPUs and nodes, fault
injection, the audit log.

    GET  /v1/nodes
    POST /v1/gpus/{node}/{index}/{drain|offline|online}   body {"reason": str, "force": bool}
    POST /v1/nodes/{node}/{drain|offline|online}          body {"reason": str, "force": bool}
    POST /v1/debug/inject                                 body {"script": str}
    GET  /v1/audit?limit=N

The actor is the token's name; with authentication off, the `X-Actor` header (the CLI sends
the OS user), else "anonymous". Actions and injection need the operator or admin role (403
otherwise, recorded in the audit chain); listing nodes any role; the audit log operators and
admins. Errors: 404 unknown node/GPU, 409 refused (offline of a busy GPU/node without force,
an action the state table forbids), 422 bad script or injection off.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query
from fastapi.concurrency import run_in_threadpool

from gpu_platform.adapters.inbound.rest.auth import Auth
from gpu_platform.adapters.inbound.rest.schemas import (
    CONFLICT,
    NOT_FOUND,
    AdminActionIn,
    AuditOut,
    GpuOut,
    InjectIn,
    InjectOut,
    NodeOut,
)
from gpu_platform.domain.errors import NotFound
from gpu_platform.domain.model.tenancy import Permission, Principal
from gpu_platform.ports.inbound.admin_service import AdminService
from gpu_platform.ports.inbound.job_service import JobService

__all__ = ["admin_router"]

Action = Literal["drain", "offline", "online"]


def admin_router(service: JobService, admin: AdminService, auth: Auth) -> APIRouter:
    router = APIRouter(tags=["admin"])
    operator = auth.require(Permission.HARDWARE_ADMIN, audit_as="hardware.action")
    reader = auth.require(Permission.CLUSTER_READ)
    auditor = auth.require(Permission.AUDIT_READ)

    @router.get("/v1/nodes", response_model=list[NodeOut])
    async def nodes(_: Principal = Depends(reader)) -> list[NodeOut]:
        return [NodeOut.of(n) for n in await run_in_threadpool(admin.nodes)]

    @router.post(
        "/v1/gpus/{node}/{index}/{action}",
        response_model=GpuOut,
        responses={**NOT_FOUND, **CONFLICT},
    )
    async def gpu_action(
        node: str,
        index: int,
        action: Action,
        body: AdminActionIn | None = None,
        who: Principal = Depends(operator),
    ) -> GpuOut:
        body = body or AdminActionIn(reason="", force=False)
        actor = who.name

        def act() -> GpuOut:
            admin.gpu_action(node, index, action, reason=body.reason, actor=actor, force=body.force)
            for info in service.gpus():
                if info.gpu.node == node and info.gpu.index == index:
                    return GpuOut.of(info)
            raise NotFound("gpu", f"{node}:{index}")  # pragma: no cover - acted on it above

        return await run_in_threadpool(act)

    @router.post(
        "/v1/nodes/{node}/{action}", response_model=NodeOut, responses={**NOT_FOUND, **CONFLICT}
    )
    async def node_action(
        node: str,
        action: Action,
        body: AdminActionIn | None = None,
        who: Principal = Depends(operator),
    ) -> NodeOut:
        body = body or AdminActionIn(reason="", force=False)
        actor = who.name

        def act() -> NodeOut:
            admin.node_action(node, action, reason=body.reason, actor=actor, force=body.force)
            return NodeOut.of(next(n for n in admin.nodes() if n.name == node))

        return await run_in_threadpool(act)

    @router.post("/v1/debug/inject", response_model=InjectOut)
    async def inject(body: InjectIn, who: Principal = Depends(operator)) -> InjectOut:
        lines = await run_in_threadpool(lambda: admin.inject(body.script, actor=who.name))
        return InjectOut(scheduled=lines)

    @router.get("/v1/audit", response_model=list[AuditOut])
    async def audit(
        limit: int = Query(100, ge=1, le=10000), _: Principal = Depends(auditor)
    ) -> list[AuditOut]:
        return [AuditOut.of(a) for a in await run_in_threadpool(admin.audit, limit)]

    return router
