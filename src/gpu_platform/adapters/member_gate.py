"""`MemberGate`: who may speak on a server's Raft port or agents' port — members of this
cluster, with the port's role.

A connection is admitted when

* with mutual TLS (the server's `TlsFiles.ca` set): its certificate binds the port's role and
  the name the connection claims — URI SAN `gpu-platform://ROLE/NAME` (adapters.member_certs).
  A certificate without one (a plain user certificate from the same CA), of another role (a
  CLI user's `client`, a server's used by an agent) or naming another node is refused
  `PERMISSION_DENIED`. A stream on the server's own unix socket (the in-process agent, mode
  0600) has no certificate and is not asked for one;
* and, when the cluster has a token, it presents it (metadata `gpu-platform-cluster-token`),
  else `UNAUTHENTICATED`.

Every refusal is logged, counted (`refused`) and recorded by `audit` (an `AuditRecord`: actor
the claimed member, action `<port>.connect`, target the peer address, outcome
`refused: <why>`); the same refusal from the same peer host is recorded at most once per
`quiet_s`, and at most 256 refusals per `quiet_s` in all, so a retrying or flooding stranger
does not flood the audit log (every refusal is still logged).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc
import grpc.aio
import structlog

from gpu_platform.adapters.cluster_identity import (
    TOKEN_METADATA,
    Member,
    cluster_id,
    same_cluster,
)
from gpu_platform.domain.model.audit import AuditRecord

__all__ = [
    "MemberGate",
    "Refusal",
    "client_certificate_refusal",
    "peer_certificate_digest",
    "peer_member",
]

log = structlog.get_logger(__name__)
_MAX_AUDITED = 256  # refusals audited per port per quiet period, at most


@dataclass(frozen=True, slots=True)
class Refusal:
    code: grpc.StatusCode
    reason: str


def _auth(context: grpc.aio.ServicerContext) -> dict[str, list[bytes]]:
    return {k: list(v) for k, v in (context.auth_context() or {}).items()}


def peer_member(context: grpc.aio.ServicerContext) -> Member | None:
    """The member the peer's certificate names (None: no certificate, or no single one)."""
    found = {
        m
        for uri in _auth(context).get("peer_uri", [])
        if (m := Member.from_uri(uri.decode(errors="replace"))) is not None
    }
    return found.pop() if len(found) == 1 else None


def peer_certificate_digest(context: grpc.aio.ServicerContext) -> str:
    """SHA-256 (hex, 16 digits) of the peer's certificate; '' without one."""
    pems = _auth(context).get("x509_pem_cert", [])
    return hashlib.sha256(pems[0]).hexdigest()[:16] if pems else ""


def client_certificate_refusal(context: grpc.aio.ServicerContext) -> str:
    """Why a client API call is refused for its certificate ('' when it is not): a `server`
    or `agent` member certificate is not a user's. (A `client` certificate, or a user
    certificate binding no member, is admitted; tokens then say who the caller is.)"""
    member = peer_member(context)
    if member is None or member.role == "client":
        return ""
    return (
        f"its certificate is a {member.role}'s ({member.name}); the client API admits "
        "client certificates only (gpu-platform certs issue client NAME)"
    )


def _local(context: grpc.aio.ServicerContext) -> bool:
    return (context.peer() or "").startswith("unix:")


class MemberGate:
    """The admission rule of one port (`port`: "raft" or "agent"; `role`: what it admits)."""

    def __init__(
        self,
        port: str,
        role: str,
        *,
        token: str | None,
        mtls: bool,
        audit: Callable[[AuditRecord], None] | None = None,
        quiet_s: float = 10.0,
    ) -> None:
        self.port = port
        self.role = role
        self.token = token
        self.mtls = mtls
        self.refused = 0
        self._audit = audit
        self._quiet_s = quiet_s
        self._recent: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def check(self, context: grpc.aio.ServicerContext, claimed: str) -> Refusal | None:
        """Why a connection claiming to be `<role> <claimed>` is not admitted (None: it is)."""
        if self.mtls and not _local(context):
            member = peer_member(context)
            want = Member.from_uri(f"gpu-platform://{self.role}/{claimed}")
            if member is None:
                return Refusal(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"its certificate names no gpu-platform member (needs URI SAN "
                    f"gpu-platform://{self.role}/{claimed}; see `gpu-platform certs issue`)",
                )
            if member.role != self.role:
                return Refusal(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"its certificate is a {member.role}'s ({member.name}); the {self.port} "
                    f"port admits {self.role} certificates only",
                )
            if want is None or member != want:
                return Refusal(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"its certificate is {member}'s, but it claims to be {self.role} {claimed}",
                )
        if self.token is not None:
            presented = dict(context.invocation_metadata() or ()).get(TOKEN_METADATA)
            if not same_cluster(self.token, presented if isinstance(presented, str) else None):
                what = "another cluster's token" if presented else "no cluster token"
                return Refusal(
                    grpc.StatusCode.UNAUTHENTICATED,
                    f"it presents {what}; this is cluster {cluster_id(self.token)}",
                )
        return None

    def record(self, context: grpc.aio.ServicerContext, claimed: str, reason: str) -> None:
        """Log, count and audit a refusal of `<role> <claimed>` for `reason`."""
        peer = context.peer() or "?"
        event = "raft message refused" if self.port == "raft" else f"{self.port} refused"
        log.warning(event, peer=peer, claims=claimed, why=reason)
        with self._lock:
            self.refused += 1
            now = time.monotonic()
            key = (peer.rpartition(":")[0], reason)
            if now - self._recent.get(key, -self._quiet_s) < self._quiet_s:
                return
            self._recent = {k: t for k, t in self._recent.items() if now - t < self._quiet_s}
            if len(self._recent) >= _MAX_AUDITED:  # a flood of varied refusals: log only
                return
            self._recent[key] = now
        if self._audit is None:
            return
        cert = peer_member(context)
        actor = f"{self.role} {claimed}" + (f" (certificate: {cert})" if cert else "")
        record = AuditRecord(
            time.time(), actor, f"{self.port}.connect", peer, "", f"refused: {reason}"
        )
        try:
            self._audit(record)
        except Exception:  # the refusal stands; a failing audit store is logged, not raised
            log.exception("audit of a refused connection failed", peer=peer)
