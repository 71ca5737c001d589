"""Cluster identity on the wire: the token agents present, compared in constant time, and the
member (role and name) a certificate binds.

The token (see `infrastructure.cluster_token` for where it comes from) travels as gRPC
metadata `gpu-platform-cluster-token` on an agent's stream; the cluster id, a digest of it, is
what logs and refusals show. A member certificate (adapters.member_certs) names its `Member`
in a URI subject alternative name `gpu-platform://ROLE/NAME`.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

__all__ = ["ROLES", "SCHEME", "TOKEN_METADATA", "Member", "cluster_id", "same_cluster"]

#: gRPC metadata key carrying the token on agents' streams.
TOKEN_METADATA = "gpu-platform-cluster-token"


def cluster_id(token: str) -> str:
    """A short public name of the cluster the token belongs to."""
    return "c-" + hashlib.sha256(token.encode()).hexdigest()[:12]


def same_cluster(expected: str, presented: str | None) -> bool:
    """Constant-time comparison of a presented token with the cluster's."""
    if not presented:
        return False
    want = hashlib.sha256(expected.encode()).digest()
    got = hashlib.sha256(presented.encode()).digest()
    return hmac.compare_digest(want, got)


SCHEME = "gpu-platform"
ROLES = ("server", "agent", "client")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


@dataclass(frozen=True, slots=True)
class Member:
    """A role (one of ROLES) and the name it holds (server id, node name or user)."""

    role: str
    name: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role: {self.role!r} is not one of {', '.join(ROLES)}")
        if not _NAME.match(self.name):
            raise ValueError(f"name: {self.name!r} is not 1-63 of A-Z a-z 0-9 . _ -")
        if self.role == "server" and not (self.name.isdigit() and int(self.name) > 0):
            raise ValueError(f"name: a server's name is its server id (> 0), not {self.name!r}")

    @property
    def uri(self) -> str:
        return f"{SCHEME}://{self.role}/{self.name}"

    @classmethod
    def from_uri(cls, uri: str) -> Member | None:
        """The member a `gpu-platform://ROLE/NAME` URI names; None for any other URI."""
        prefix = f"{SCHEME}://"
        if not uri.startswith(prefix):
            return None
        role, _, name = uri[len(prefix) :].partition("/")
        try:
            return cls(role, name)
        except ValueError:
            return None

    def __str__(self) -> str:
        return f"{self.role} {self.name}"
