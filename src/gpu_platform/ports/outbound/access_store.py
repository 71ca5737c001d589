"""AccessStore: durable tenants and bearer tokens (only their SHA-256 digests are stored)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gpu_platform.domain.model.tenancy import Role

__all__ = ["AccessStore", "TokenRecord"]


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """A token as stored: `token_id` is public (listed, used to revoke); `digest` is the
    SHA-256 hex of the secret; `created_at`/`revoked_at` are Unix seconds."""

    token_id: str
    digest: str
    name: str
    tenant: str
    role: Role
    created_at: float
    revoked_at: float | None = None


@runtime_checkable
class AccessStore(Protocol):
    """Durable when each call returns. Thread-safe.

    `add_tenant` is idempotent. `add_token` raises ValueError for a duplicate id or digest.
    `revoke_token` returns False for an unknown id (revoking twice keeps the first time) and
    raises InvalidRequest (field `token_id`) for the last live admin token. `add_first_admin`
    adds tenant `record.tenant` if missing and the admin token `record`, atomically, unless a
    live admin token exists: then it returns False and changes nothing.
    A replicated store (`application.access_replica`) may also raise LeaderElsewhere from the
    writing calls on a server that does not lead.
    """

    def add_tenant(self, name: str, created_at: float) -> None: ...

    def tenants(self) -> list[tuple[str, float]]:
        """(name, created_at) of every tenant, by name."""
        ...

    def add_token(self, record: TokenRecord) -> None: ...

    def token_by_digest(self, digest: str) -> TokenRecord | None: ...

    def tokens(self) -> list[TokenRecord]:
        """Every token, revoked ones included, oldest first."""
        ...

    def revoke_token(self, token_id: str, at: float) -> bool: ...

    def add_first_admin(self, record: TokenRecord) -> bool: ...
