"""TLS and admission for the TCP transports (Raft's, and the agents' framed streams), with
the gRPC transports' rules.

* `server_context` / `client_context`: Python `ssl` contexts from the same `TlsFiles` as gRPC's
  credentials — with `ca` set, the receiver requires a client certificate chaining to it
  (mTLS) and the sender trusts only it; the sender checks the receiver's name against its
  certificate (as gRPC does) and OpenSSL's purpose checks refuse a certificate without
  serverAuth (an agent's or a user's) on the receiving end. Both offer ALPN `alpn` (Raft's
  `ALPN` unless told) then `h2`, the receiver preferring `alpn`: two TCP peers agree on it (or
  on nothing, with a peer from before ALPN), while a gRPC peer (which needs `h2` to complete
  the handshake) agrees on `h2` and is then recognised as one instead of failing the
  handshake unnamed.
* `SocketCallContext`: what `MemberGate` reads of a gRPC call (`auth_context()`, `peer()`,
  `invocation_metadata()`), taken from an accepted socket (or an asyncio stream's
  `ssl.SSLObject`) and the hello's token, so a TCP connection is admitted, refused, logged
  and audited by the very same gate.
"""

from __future__ import annotations

import socket
import ssl
from typing import TYPE_CHECKING, cast

from gpu_platform.adapters.cluster_identity import TOKEN_METADATA
from gpu_platform.adapters.tls import TlsFiles

if TYPE_CHECKING:
    import grpc.aio

__all__ = ["ALPN", "SocketCallContext", "client_context", "server_context", "tune"]

ALPN = "gpu-platform-raft"


def _load(ctx: ssl.SSLContext, tls: TlsFiles, alpn: str) -> ssl.SSLContext:
    tls._read()  # a missing file fails here, naming it
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(tls.cert, tls.key)
    ctx.set_alpn_protocols([alpn, "h2"])
    return ctx


def server_context(tls: TlsFiles, alpn: str = ALPN) -> ssl.SSLContext:
    ctx = _load(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), tls, alpn)
    if tls.ca is not None:
        ctx.load_verify_locations(cafile=str(tls.ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(tls: TlsFiles, alpn: str = ALPN) -> ssl.SSLContext:
    ctx = _load(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), tls, alpn)
    if tls.ca is not None:
        ctx.load_verify_locations(cafile=str(tls.ca))
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    return ctx


def tune(sock: socket.socket) -> None:
    """No Nagle delay; a peer cut off without RST or FIN is given up in seconds, not minutes
    (keepalive after 2 s idle, 3 probes 1 s apart; unacknowledged data for 5 s), like the gRPC
    transport's keepalive."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (
        ("TCP_KEEPIDLE", 2),
        ("TCP_KEEPINTVL", 1),
        ("TCP_KEEPCNT", 3),
        ("TCP_USER_TIMEOUT", 5000),
    ):
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


class SocketCallContext:
    """An accepted connection seen as the gRPC call context `MemberGate` expects."""

    def __init__(
        self, sock: socket.socket | ssl.SSLObject | None, peer: str, token: str | None
    ) -> None:
        self._sock = sock
        self._peer = peer
        self._token = token

    def peer(self) -> str:
        return self._peer

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ((TOKEN_METADATA, self._token),) if self._token else ()

    def auth_context(self) -> dict[str, list[bytes]]:
        sock = self._sock
        if not isinstance(sock, ssl.SSLSocket | ssl.SSLObject):
            return {}
        der = sock.getpeercert(binary_form=True)
        if not der:
            return {}
        names = (sock.getpeercert() or {}).get("subjectAltName", ())
        uris = [str(name[1]).encode() for name in names if name[0] == "URI"]
        return {"peer_uri": uris, "x509_pem_cert": [ssl.DER_cert_to_PEM_cert(der).encode()]}

    def as_grpc(self) -> grpc.aio.ServicerContext:
        """Typed as what the gate takes; it reads only the three methods above."""
        return cast("grpc.aio.ServicerContext", self)
