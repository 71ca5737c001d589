"""Admin routes over the AdminService port: drain/offline/online GPUs and nodes, fault
injection, the audit log.

    GET  /v1/nodes
    POST /v1/gpus/{node}/{index}/{drain|offline|online}   body {"reason": str, "force": bool}
    POST /v1/nodes/{node}/{drain|offline|online}          body {"reason": str, "force": bool}
    DELETE /v1/nodes/{node}?reason=...                    no work there, agent gone; operator
    POST /v1/debug/inject                                 body {"script": str}
    GET  /v1/audit?limit=N
    GET  /v1/cluster                                      any role; any server answers
    POST /v1/cluster/servers                              body {"id", "address"}; admin
    DELETE /v1/cluster/servers/{id}                       admin
    POST /v1/cluster/leader                               body {"id"}; admin
    GET  /v1/quotas                                       any role
    PUT  /v1/quotas/{tenant}                              body QuotaIn; admin
    DELETE /v1/quotas/{tenant}                            admin

The actor is the token's name; with authentication off, the `X-Actor` header (the CLI sends
the OS user), else "anonymous". Actions and injection need the operator or admin role (403
otherwise, recorded in the audit chain); listing nodes any role; the audit log operators and
admins. Errors: 404 unknown node/GPU, 409 refused (offline of a busy GPU/node without force,
an action the state table forbids), 422 bad script or injection off.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query, Response
from fastapi.concurrency import run_in_threadpool

from gpu_platform.adapters.inbound.rest.auth import Auth
from gpu_platform.adapters.inbound.rest.schemas import (
    CONFLICT,
    NOT_FOUND,
    AddServerIn,
    AdminActionIn,
    AuditOut,
    ClusterOut,
    GpuOut,
    InjectIn,
    InjectOut,
    NodeOut,
    QuotaIn,
    QuotaOut,
    TransferIn,
)
from gpu_platform.domain.errors import NotFound
from gpu_platform.domain.model.tenancy import Permission, Principal
from gpu_platform.ports.inbound.admin_service import AdminService
from gpu_platform.ports.inbound.job_service import JobService

__all__ = ["admin_router"]

Action = Literal["drain", "offline", "online"]
TenantName = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]


def admin_router(service: JobService, admin: AdminService, auth: Auth) -> APIRouter:
    router = APIRouter(tags=["admin"])
    operator = auth.require(Permission.HARDWARE_ADMIN, audit_as="hardware.action")
    reader = auth.require(Permission.CLUSTER_READ)
    auditor = auth.require(Permission.AUDIT_READ)
    quota_admin = auth.require(Permission.ACCESS_ADMIN, audit_as="quota.set")
    member_admin = auth.require(Permission.ACCESS_ADMIN, audit_as="cluster.membership")

    @router.get("/v1/quotas", response_model=list[QuotaOut])
    async def quotas(_: Principal = Depends(reader)) -> list[QuotaOut]:
        found = await run_in_threadpool(admin.quotas)
        return [QuotaOut.of(t, q) for t, q in sorted(found.items())]

    @router.put("/v1/quotas/{tenant}", response_model=QuotaOut)
    async def set_quota(
        tenant: TenantName, body: QuotaIn, who: Principal = Depends(quota_admin)
    ) -> QuotaOut:
        quota = body.to_quota()
        await run_in_threadpool(
            auth.trail.around, who, "quota.set", tenant, lambda: admin.set_quota(tenant, quota)
        )
        return QuotaOut.of(tenant, quota)

    @router.delete("/v1/quotas/{tenant}", status_code=204, responses=NOT_FOUND)
    async def delete_quota(tenant: TenantName, who: Principal = Depends(quota_admin)) -> None:
        def delete() -> None:
            if tenant not in admin.quotas():
                raise NotFound("quota", tenant)
            admin.set_quota(tenant, None)

        await run_in_threadpool(auth.trail.around, who, "quota.delete", tenant, delete)

    @router.get("/v1/cluster", response_model=ClusterOut)
    async def cluster(_: Principal = Depends(reader)) -> ClusterOut:
        """This server's view of the control plane; any server answers (no redirect)."""
        return ClusterOut.of(await run_in_threadpool(admin.cluster))

    @router.post("/v1/cluster/servers", response_model=ClusterOut, responses={**CONFLICT})
    async def add_server(body: AddServerIn, who: Principal = Depends(member_admin)) -> ClusterOut:
        info = await run_in_threadpool(
            lambda: admin.add_server(body.id, body.address, actor=who.name)
        )
        return ClusterOut.of(info)

    @router.delete(
        "/v1/cluster/servers/{server_id}",
        response_model=ClusterOut,
        responses={**NOT_FOUND, **CONFLICT},
    )
    async def remove_server(
        server_id: Annotated[int, Path(ge=1)], who: Principal = Depends(member_admin)
    ) -> ClusterOut:
        info = await run_in_threadpool(lambda: admin.remove_server(server_id, actor=who.name))
        return ClusterOut.of(info)

    @router.post(
        "/v1/cluster/leader", response_model=ClusterOut, responses={**NOT_FOUND, **CONFLICT}
    )
    async def transfer_leader(
        body: TransferIn, who: Principal = Depends(member_admin)
    ) -> ClusterOut:
        info = await run_in_threadpool(lambda: admin.transfer_leader(body.id, actor=who.name))
        return ClusterOut.of(info)

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

    @router.delete("/v1/nodes/{node}", status_code=204, responses={**NOT_FOUND, **CONFLICT})
    async def remove_node(
        node: str,
        reason: str = Query("", max_length=1024, description="why, for the audit log"),
        who: Principal = Depends(operator),
    ) -> Response:
        await run_in_threadpool(lambda: admin.remove_node(node, reason=reason, actor=who.name))
        return Response(status_code=204)

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
