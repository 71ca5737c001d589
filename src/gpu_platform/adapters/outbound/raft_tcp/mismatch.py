"""A peer that speaks the gRPC Raft transport: how the TCP transport recognises it and says so.

Servers of one cluster must all use the same `raft_transport`. When they do not (a cluster
upgraded from the old `grpc` default where only some servers restarted, or a setting on some
servers only), the two sides cannot talk and the cluster may have no quorum. The TCP transport
recognises the other side by its first bytes, both ways:

* accepting: a gRPC client opens with the HTTP/2 client preface (`PREFACE`), where a TCP peer
  sends its hello (`wire.read_hello` raises `GrpcPeer`);
* dialing: a gRPC server's first frame is an HTTP/2 SETTINGS frame (9-byte header, type 0x04,
  stream 0), where a TCP peer answers the hello (`wire.read_answer` raises `GrpcPeer`).

With TLS, the handshake has already agreed on HTTP/2 by ALPN (`adapters.tcp_security`;
`negotiated_h2`).
Either way the connection is closed (the dialing side keeps retrying: the operator may fix the
peer) and `TransportMismatch` logs one warning per peer address per `WINDOW` seconds, naming
the address and the fix, rather than one per reconnect.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable

import structlog

__all__ = [
    "PREFACE",
    "WINDOW",
    "TransportMismatch",
    "is_grpc_answer",
    "is_grpc_hello",
    "negotiated_h2",
]

log = structlog.get_logger(__name__)
PREFACE = (
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # RFC 9113 section 3.4: every HTTP/2 client's first bytes
)
WINDOW = 60.0  # seconds between two warnings about the same peer address
_SETTINGS = 0x04
FIX = (
    "raft_transport must be the same on every server of a cluster "
    "(GPU_PLATFORM_RAFT_TRANSPORT): set it to tcp on that server, or to grpc on every server"
)


def is_grpc_hello(head: bytes) -> bool:
    """Whether the first bytes a peer sent (at least one) are the HTTP/2 client preface's."""
    n = min(len(head), len(PREFACE))
    return n > 0 and head[:n] == PREFACE[:n]


def negotiated_h2(sock: socket.socket) -> bool:
    """Whether `sock`'s TLS handshake agreed on HTTP/2 (ALPN `h2`): the peer is a gRPC one."""
    return isinstance(sock, ssl.SSLSocket) and sock.selected_alpn_protocol() == "h2"


def is_grpc_answer(head: bytes) -> bool:
    """Whether 9 bytes a dialed peer answered with are an HTTP/2 SETTINGS frame's header
    (24-bit length, type, flags, 31-bit stream id 0): a gRPC server's first frame."""
    if len(head) < 9:
        return False
    stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
    return head[3] == _SETTINGS and stream == 0 and int.from_bytes(head[:3], "big") % 6 == 0


class TransportMismatch:
    """Logs peers speaking gRPC: one warning per address per `window` seconds.

    Thread-safe (called from reader and writer threads). `clock` returns seconds."""

    def __init__(self, window: float = WINDOW, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}  # address -> when it was last logged

    def _due(self, address: str) -> bool:
        now = self._clock()
        with self._lock:
            last = self._last.get(address)
            if last is not None and now - last < self.window:
                return False
            if len(self._last) >= 1024:  # many hosts (a scan): forget those past the window
                self._last = {a: t for a, t in self._last.items() if now - t < self.window}
            self._last[address] = now
            return True

    def inbound(self, host: str, port: int) -> None:
        """A connection from `host`:`port` opened with the HTTP/2 preface; it is being closed.
        Rate-limited per host: each reconnect comes from a new port."""
        if self._due(host):
            peer = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            log.warning(
                f"raft peer {peer} speaks the gRPC Raft transport but this server uses tcp; "
                f"its connection is refused. Fix: {FIX}",
                peer=peer,
                peer_transport="grpc",
                raft_transport="tcp",
            )

    def outbound(self, node: int, address: str) -> None:
        """Peer `node` at `address` answered the hello with HTTP/2; the link retries."""
        if self._due(address):
            log.warning(
                f"raft peer {node} at {address} speaks the gRPC Raft transport but this server "
                f"uses tcp; cannot send to it (retrying). Fix: {FIX}",
                peer=address,
                node=node,
                peer_transport="grpc",
                raft_transport="tcp",
            )
