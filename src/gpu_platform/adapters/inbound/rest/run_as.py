"""Run-as grants over REST (admins only; each change is recorded in the audit chain):

    GET    /v1/run-as                   every grant
    PUT    /v1/run-as/{tenant}          body RunAsIn {"accounts": [...], "allow_root": false}
    DELETE /v1/run-as/{tenant}          the tenant's jobs may then name no account

Errors: 403 not an admin, 404 no grant to delete, 422 naming `accounts` (a bad name, none,
or root without `allow_root`).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from gpu_platform.adapters.inbound.rest.auth import Auth
from gpu_platform.adapters.inbound.rest.schemas import NOT_FOUND
from gpu_platform.domain.model.run_as import MAX_ACCOUNTS, RunAsGrant
from gpu_platform.domain.model.tenancy import Principal
from gpu_platform.ports.inbound.run_as import RunAsAdmin

__all__ = ["RunAsIn", "RunAsOut", "run_as_router"]

TenantName = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]


class RunAsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    accounts: list[Annotated[str, Field(max_length=32)]] = Field(
        ..., max_length=MAX_ACCOUNTS, description="accounts the tenant's jobs may name as user"
    )
    allow_root: bool = Field(False, description="required to list root")


class RunAsOut(BaseModel):
    tenant: str
    accounts: list[str]
    allow_root: bool

    @classmethod
    def of(cls, grant: RunAsGrant) -> RunAsOut:
        return cls(tenant=grant.tenant, accounts=list(grant.accounts), allow_root=grant.allow_root)


def run_as_router(auth: Auth, run_as: RunAsAdmin) -> APIRouter:
    router = APIRouter(tags=["access"])

    @router.get("/v1/run-as", response_model=list[RunAsOut])
    async def grants(who: Principal = Depends(auth.principal)) -> list[RunAsOut]:
        return [RunAsOut.of(g) for g in await run_in_threadpool(run_as.grants, who)]

    @router.put("/v1/run-as/{tenant}", response_model=RunAsOut)
    async def set_grant(
        tenant: TenantName, body: RunAsIn, who: Principal = Depends(auth.principal)
    ) -> RunAsOut:
        made = await run_in_threadpool(run_as.grant, who, tenant, body.accounts, body.allow_root)
        return RunAsOut.of(made)

    @router.delete("/v1/run-as/{tenant}", status_code=204, responses=NOT_FOUND)
    async def delete_grant(tenant: TenantName, who: Principal = Depends(auth.principal)) -> None:
        await run_in_threadpool(run_as.revoke, who, tenant)

    return router
