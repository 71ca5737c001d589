"""Authentication and authorization at the REST edge, as FastAPI dependencies.

`Authorization: Bearer <token>` is resolved by the AccessService into a Principal, which then
takes one token from its rate-limit bucket. With authentication off every caller is the
anonymous admin, named by the `X-Actor` header for the audit log. Routes ask for a
`TenantScope` (the principal's view of the jobs) or call `require(permission)`.

    GET    /v1/whoami
    GET    /v1/tenants            POST /v1/tenants   {"name"}
    GET    /v1/tokens             POST /v1/tokens    {"name", "tenant", "role"}
    DELETE /v1/tokens/{token_id}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Depends, Header, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gpu_platform.adapters.inbound.rest.problems import NOT_FOUND
from gpu_platform.adapters.inbound.rest.schemas import (
    PrincipalOut,
    TenantIn,
    TenantOut,
    TokenIn,
    TokenIssuedOut,
    TokenOut,
)
from gpu_platform.application.auth_scope import AuditTrail, TenantScope
from gpu_platform.domain.model.tenancy import Permission, Principal, Role
from gpu_platform.ports.inbound.access import AccessService, TokenInfo
from gpu_platform.ports.inbound.job_service import JobService

__all__ = ["ACTOR_MAX_LENGTH", "Auth", "access_router"]

ACTOR_MAX_LENGTH = 128  # the X-Actor header

_bearer = HTTPBearer(auto_error=False, description="A token from `gpu-platform tokens create`.")


class Auth:
    """The dependencies routes use: `principal`, `scope`, and `require(permission)`."""

    def __init__(self, access: AccessService, jobs: JobService, trail: AuditTrail) -> None:
        self.access = access
        self.jobs = jobs
        self.trail = trail

        async def principal(
            request: Request,
            credentials: HTTPAuthorizationCredentials | None = Security(_bearer),
            actor: str = Header(
                "anonymous",
                alias="X-Actor",
                max_length=ACTOR_MAX_LENGTH,
                description="who acts, for the audit log (only when authentication is off)",
            ),
        ) -> Principal:
            source = request.client.host if request.client is not None else ""
            secret = None if credentials is None else credentials.credentials
            return self.identify(secret, source, actor)

        self.principal = principal

        async def scope(who: Principal = Depends(principal)) -> TenantScope:
            return self.tenant_scope(who)

        self.scope = scope

    def identify(self, secret: str | None, source: str, actor: str) -> Principal:
        """The principal of a request (401 unknown token), admitted by its rate limit (429)."""
        who = self.access.authenticate(secret, source)
        self.access.admit(who)
        if not self.access.enabled:
            who = dataclasses.replace(who, name=actor)
        return who

    def tenant_scope(self, who: Principal) -> TenantScope:
        return TenantScope(self.jobs, who, self.trail)

    def require(
        self, permission: Permission, audit_as: str | None = None
    ) -> Callable[..., Awaitable[Principal]]:
        """A dependency: the principal, if its role allows `permission` (else 403; recorded
        in the audit chain as a refused `audit_as` when given)."""
        principal = self.principal
        trail = self.trail

        async def allowed(who: Principal = Depends(principal)) -> Principal:
            if not who.may(permission) and audit_as is not None:
                trail.record(who, audit_as, "-", f"refused: role {who.role} lacks {permission}")
            who.require(permission)
            return who

        return allowed


def _token_out(t: TokenInfo) -> TokenOut:
    return TokenOut(
        token_id=t.token_id,
        name=t.name,
        tenant=t.tenant,
        role=str(t.role),
        created_at=t.created_at,
        revoked_at=t.revoked_at,
    )


def access_router(auth: Auth) -> APIRouter:
    router = APIRouter(tags=["access"])
    access = auth.access

    @router.get("/v1/whoami", response_model=PrincipalOut)
    async def whoami(who: Principal = Depends(auth.principal)) -> PrincipalOut:
        return PrincipalOut(
            name=who.name,
            tenant=who.tenant,
            role=str(who.role),
            token_id=who.token_id or None,
            auth=access.enabled,
        )

    @router.get("/v1/tenants", response_model=list[TenantOut])
    async def tenants(who: Principal = Depends(auth.principal)) -> list[TenantOut]:
        found = await run_in_threadpool(access.tenants, who)
        return [TenantOut(name=t.name, created_at=t.created_at) for t in found]

    @router.post("/v1/tenants", status_code=201, response_model=TenantOut)
    async def create_tenant(body: TenantIn, who: Principal = Depends(auth.principal)) -> TenantOut:
        t = await run_in_threadpool(access.create_tenant, who, body.name)
        return TenantOut(name=t.name, created_at=t.created_at)

    @router.get("/v1/tokens", response_model=list[TokenOut])
    async def tokens(who: Principal = Depends(auth.principal)) -> list[TokenOut]:
        return [_token_out(t) for t in await run_in_threadpool(access.tokens, who)]

    @router.post("/v1/tokens", status_code=201, response_model=TokenIssuedOut, responses=NOT_FOUND)
    async def create_token(body: TokenIn, who: Principal = Depends(auth.principal)) -> Any:
        issued = await run_in_threadpool(
            access.create_token, who, body.name, body.tenant, Role(body.role)
        )
        return TokenIssuedOut(token=issued.secret, **_token_out(issued.info).model_dump())

    @router.delete("/v1/tokens/{token_id}", response_model=TokenOut, responses=NOT_FOUND)
    async def revoke_token(token_id: str, who: Principal = Depends(auth.principal)) -> TokenOut:
        return _token_out(await run_in_threadpool(access.revoke_token, who, token_id))

    return router
