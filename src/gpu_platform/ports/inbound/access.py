"""AccessService: authenticate bearer tokens; manage tenants and tokens (admins only)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gpu_platform.domain.model.tenancy import Principal, Role

__all__ = ["AccessService", "IssuedToken", "TenantInfo", "TokenInfo"]


@dataclass(frozen=True, slots=True)
class TokenInfo:
    token_id: str
    name: str
    tenant: str
    role: Role
    created_at: float
    revoked_at: float | None


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A new token: `secret` is shown once and never stored."""

    info: TokenInfo
    secret: str


@dataclass(frozen=True, slots=True)
class TenantInfo:
    name: str
    created_at: float


@runtime_checkable
class AccessService(Protocol):
    """`enabled` says whether tokens are required; when not, every caller is
        `tenancy.ANONYMOUS_ADMIN`. `authenticate` raises Unauthenticated, or TooManyRequests when
    `source` (the client's address) presented too many bad tokens lately; `admit` raises
        TooManyRequests when the principal's token bucket is empty. The management calls take the
        acting principal and raise Forbidden unless it is an admin; `create_token` raises
        NotFound for an unknown tenant, InvalidRequest for a bad name; `revoke_token` raises
        InvalidRequest (field `token_id`) for the last live admin token. Thread-safe."""

    @property
    def enabled(self) -> bool: ...

    def authenticate(self, secret: str | None, source: str = "") -> Principal: ...

    def admit(self, principal: Principal) -> None: ...

    def create_tenant(self, actor: Principal, name: str) -> TenantInfo: ...

    def tenants(self, actor: Principal) -> list[TenantInfo]: ...

    def create_token(self, actor: Principal, name: str, tenant: str, role: Role) -> IssuedToken: ...

    def tokens(self, actor: Principal) -> list[TokenInfo]: ...

    def revoke_token(self, actor: Principal, token_id: str) -> TokenInfo: ...
