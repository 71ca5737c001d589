"""Tenants, roles, principals and what each role may do.

A bearer token maps to one `Principal`: a tenant and a `Role`. Viewers only read (their own
tenant's jobs, the cluster); users see and act on their own tenant's jobs only; operators and
admins see every tenant and may drain/offline/online GPUs and nodes; only admins manage tenants
and tokens. The rules are one table (`ALLOWED`).

Errors (all `DomainError`):

    AccessError
    ├── Unauthenticated   no token, or an unknown/revoked one      401 / UNAUTHENTICATED
    ├── Forbidden         the principal's role may not do this     403 / PERMISSION_DENIED
    └── TooManyRequests   a rate or admission limit; retry_after_s 429 / RESOURCE_EXHAUSTED
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from gpu_platform.domain.errors import DomainError, InvalidRequest

__all__ = [
    "ALLOWED",
    "ANONYMOUS_ADMIN",
    "AccessError",
    "Forbidden",
    "Permission",
    "Principal",
    "Role",
    "TooManyRequests",
    "Unauthenticated",
    "check_tenant_name",
]

TENANT_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class Role(StrEnum):
    ADMIN = "admin"
    OPERATOR = "operator"
    USER = "user"
    VIEWER = "viewer"


class Permission(StrEnum):
    JOBS_READ = "jobs.read"
    JOBS_WRITE = "jobs.write"
    JOBS_ANY_TENANT = "jobs.any-tenant"  # see and act on other tenants' jobs
    CLUSTER_READ = "cluster.read"
    HARDWARE_ADMIN = "hardware.admin"  # drain/offline/online, fault injection
    AUDIT_READ = "audit.read"
    ACCESS_ADMIN = "access.admin"  # tenants and tokens


_VIEWER = frozenset({Permission.JOBS_READ, Permission.CLUSTER_READ})
_USER = _VIEWER | {Permission.JOBS_WRITE}
_OPERATOR = _USER | {Permission.JOBS_ANY_TENANT, Permission.HARDWARE_ADMIN, Permission.AUDIT_READ}
ALLOWED: dict[Role, frozenset[Permission]] = {
    Role.VIEWER: _VIEWER,
    Role.USER: frozenset(_USER),
    Role.OPERATOR: frozenset(_OPERATOR),
    Role.ADMIN: frozenset(_OPERATOR | {Permission.ACCESS_ADMIN}),
}


class AccessError(DomainError):
    """Base of the authentication, authorization and overload refusals."""


class Unauthenticated(AccessError):
    """No credentials, or credentials the server does not know."""


class Forbidden(AccessError):
    """Authenticated, but the role does not allow the action."""


class TooManyRequests(AccessError):
    """A rate or admission limit refused the call; retry after `retry_after_s` seconds."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: `name` (audited as the actor), `tenant`, `role`, and `token_id` (the
    public id of the token used; "" when authentication is off)."""

    name: str
    tenant: str
    role: Role
    token_id: str = ""

    def may(self, permission: Permission) -> bool:
        return permission in ALLOWED[self.role]

    def require(self, permission: Permission) -> None:
        """Raise Forbidden unless the role allows `permission`."""
        if not self.may(permission):
            raise Forbidden(f"role {self.role} may not {permission} (principal {self.name!r})")

    def sees_tenant(self, tenant: str) -> bool:
        """Whether jobs of `tenant` are visible to this principal."""
        return tenant == self.tenant or self.may(Permission.JOBS_ANY_TENANT)


# The principal of every call when authentication is off: one trusted local user.
ANONYMOUS_ADMIN = Principal(name="anonymous", tenant="default", role=Role.ADMIN)


def check_tenant_name(name: str) -> str:
    """Return `name` if it is a valid tenant name (1-64 of A-Z a-z 0-9 _ . -)."""
    if not TENANT_NAME.match(name):
        raise InvalidRequest("tenant", f"{name!r}: 1-64 characters of A-Z a-z 0-9 _ . -")
    return name
