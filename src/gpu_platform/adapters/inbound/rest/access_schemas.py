"""Wire models of access: who the caller is, tenants, and bearer tokens (a secret is shown
once, when issued).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

__all__ = [
    "PrincipalOut",
    "TenantIn",
    "TenantName",
    "TenantOut",
    "TokenIn",
    "TokenIssuedOut",
    "TokenOut",
]


class PrincipalOut(BaseModel):
    name: str
    tenant: str
    role: str
    token_id: str | None
    auth: bool = Field(description="whether the server requires tokens")


TenantName = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
]


class TenantIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: TenantName


class TenantOut(BaseModel):
    name: str
    created_at: float


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, description="who holds it (the audit actor)")
    tenant: TenantName
    role: Literal["admin", "operator", "user", "viewer"] = "user"


class TokenOut(BaseModel):
    token_id: str
    name: str
    tenant: str
    role: str
    created_at: float
    revoked_at: float | None


class TokenIssuedOut(TokenOut):
    token: str = Field(description="the secret; shown once, only its SHA-256 is stored")
