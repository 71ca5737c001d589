"""`TcpRaftTransport`: a `RaftTransport` over plain TCP sockets (TLS optional), no grpcio.

Theory of operation. Each direction between two peers is one TCP connection (wire format in
`wire`). Sending: one `PeerLink` per peer; `send()` groups the messages by peer, encodes each
group as one frame and writes it straight to that peer's socket on the caller's thread (the
Raft loop) when the socket takes it at once, else hands it to the link's writer thread (see
`link`); a large group (many entries, a snapshot) goes to the writer thread to be encoded there
while the Raft loop gets on with its fsync. Receiving: one accept thread, and one reader thread
per inbound connection, which checks the hello (`MemberGate`: certificate role and id, cluster
token, and a sender that is among this node's peers — refusals logged, counted and audited
exactly as on the gRPC transport), then reads frames and calls `on_message` for each message,
in order. So a lone commit's messages cross no thread between the sender's Raft loop and the
receiver's reader (which puts them in the Raft node's inbox) but the kernel's sockets.

A connection that sends anything that is not this protocol (`wire.WireError`) is dropped and
counted (`stats.garbage`); the node goes on. A peer that speaks the gRPC Raft transport
instead (a server configured with another `raft_transport`) is recognised, both when it dials
and when it is dialed, counted apart (`stats.grpc_in`, `stats.grpc_out`) and named in one
warning per address per minute (`mismatch`). A newer connection from the same sender replaces
an older one (the older one is closed). `stop()` closes every socket and joins every thread.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Callable, Mapping, Sequence

import structlog

from gpu_platform.adapters.grpc_bind import PortUnavailable
from gpu_platform.adapters.member_gate import MemberGate
from gpu_platform.adapters.outbound.raft_tcp.link import (
    LinkConfig,
    LinkStats,
    PeerLink,
    split_address,
)
from gpu_platform.adapters.outbound.raft_tcp.mismatch import TransportMismatch, negotiated_h2
from gpu_platform.adapters.outbound.raft_tcp.wire import (
    GrpcPeer,
    WireError,
    decode_batch,
    encode_answer,
    encode_frame,
    read_frame,
    read_hello,
)
from gpu_platform.adapters.tcp_security import (
    SocketCallContext,
    client_context,
    server_context,
    tune,
)
from gpu_platform.adapters.tls import TlsFiles
from gpu_platform.domain.consensus import Message, MessageType
from gpu_platform.domain.model.audit import AuditRecord
from gpu_platform.ports.outbound.raft import MessageHandler, SnapshotReport, UnreachableHandler

__all__ = ["TcpRaftTransport"]

log = structlog.get_logger(__name__)
MAX_INBOUND = 256  # open inbound connections (a cluster has a handful of peers)
# A group carrying more entries than this is encoded and written by the link's writer thread,
# not on the Raft loop: under load the loop goes on to its own fsync (which releases the GIL)
# while the writer encodes, as the gRPC transport's thread did; a lone commit's few entries
# still go straight to the socket.
DIRECT_ENTRIES = 16


class TcpRaftTransport:
    """A `RaftTransport` for node `node_id`, serving on `peers[node_id]` (or `listen`).

    The constructor's arguments mean what `GrpcRaftTransport`'s do (`rpc_timeout` bounds a
    connect, a handshake and a write that makes no progress)."""

    # `on_message` is called on a reader thread of this peer's connection that may block: the
    # Raft node runs its loop's work there when it can (`application.raft_inbox`).
    inline_delivery = True

    def __init__(
        self,
        node_id: int,
        peers: Mapping[int, str],
        *,
        listen: str | None = None,
        outbox_limit: int = 4096,
        max_batch: int = 1024,
        rpc_timeout: float = 2.0,
        backoff_initial: float = 0.05,
        backoff_max: float = 0.25,
        tls: TlsFiles | None = None,
        token: str | None = None,
        audit: Callable[[AuditRecord], None] | None = None,
    ) -> None:
        if node_id not in peers and listen is None:
            raise ValueError(f"node {node_id} has no address in the peer list")
        self.id = node_id
        self._addresses = dict(peers)
        self.listen = listen or peers[node_id]
        self.outbox_limit = outbox_limit
        self.max_batch = max_batch
        self.rpc_timeout = rpc_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.tls = tls
        self.token = token
        mtls = tls is not None and tls.ca is not None
        self.gate = MemberGate("raft", "server", token=token, mtls=mtls, audit=audit)
        self.stats = LinkStats()
        self.mismatch = TransportMismatch()
        self.bound_port = 0
        self._on_message: MessageHandler | None = None
        self._config: LinkConfig | None = None
        self._server_tls: ssl.SSLContext | None = None
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._lock = threading.Lock()
        self._links: dict[int, PeerLink] = {}
        self._retired: list[PeerLink] = []  # removed links whose threads stop() joins
        self._inbound: dict[threading.Thread, socket.socket] = {}
        self._latest: dict[int, socket.socket] = {}  # sender -> its current connection
        self._running = False

    @property
    def addresses(self) -> Mapping[int, str]:
        return dict(self._addresses)

    # ------------------------------------------------------------------ lifecycle
    def start(
        self,
        on_message: MessageHandler,
        on_unreachable: UnreachableHandler,
        on_snapshot: SnapshotReport,
    ) -> None:
        """Listen and connect; returns once listening (raises `PortUnavailable` if it cannot)."""
        self._server_tls = None if self.tls is None else server_context(self.tls)
        self._config = LinkConfig(
            node_id=self.id,
            token=self.token,
            tls=None if self.tls is None else client_context(self.tls),
            outbox_limit=self.outbox_limit,
            max_batch=self.max_batch,
            timeout=self.rpc_timeout,
            backoff_initial=self.backoff_initial,
            backoff_max=self.backoff_max,
            on_unreachable=on_unreachable,
            on_snapshot=on_snapshot,
            mismatch=self.mismatch,
        )
        host, port = split_address(self.listen)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            listener = socket.create_server((host, port), family=family, backlog=64)
        except OSError:
            raise PortUnavailable(
                f"Raft cannot listen on {self.listen}: the port is in use or the address is "
                "not local"
            ) from None
        self._listener = listener
        self.bound_port = listener.getsockname()[1]
        own = self._addresses.get(self.id, "")
        if own.endswith(":0"):  # asked for any free port: peers learn the one we got
            self._addresses[self.id] = f"{own[:-2]}:{self.bound_port}"
        self._on_message = on_message
        self._running = True
        self._acceptor = threading.Thread(
            target=self._accept, name=f"raft-tcp-{self.id}-accept", daemon=True
        )
        self._acceptor.start()
        with self._lock:
            for pid, addr in self._addresses.items():
                self._connect(pid, addr)

    def stop(self) -> None:
        """Close every socket and join every thread (idempotent); queued messages are dropped."""
        with self._lock:
            if not self._running:
                return
            self._running = False
            self._on_message = None
            links = [*self._links.values(), *self._retired]
            self._links.clear()
            self._retired.clear()
            inbound = dict(self._inbound)
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        if self._acceptor is not None:
            self._acceptor.join(timeout=10)
        for link in links:
            link.close()
        for sock in inbound.values():
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for link in links:
            link.join(timeout=self.rpc_timeout + 5)
        for thread in inbound:
            thread.join(timeout=10)

    # ------------------------------------------------------------------ membership
    def add_peer(self, node_id: int, address: str) -> None:
        """Add (or re-address) peer `node_id` at `address`; idempotent."""
        if node_id == self.id or self._addresses.get(node_id) == address:
            return
        self._addresses = {**self._addresses, node_id: address}
        with self._lock:
            if self._running:
                self._connect(node_id, address)

    def remove_peer(self, node_id: int) -> None:
        """Forget peer `node_id`: drop its queue and close its connection; idempotent."""
        if node_id == self.id or node_id not in self._addresses:
            return
        self._addresses = {i: a for i, a in self._addresses.items() if i != node_id}
        with self._lock:
            self._disconnect(node_id)

    def _connect(self, pid: int, addr: str) -> None:  # under the lock
        if pid == self.id or self._config is None:
            return
        old = self._links.get(pid)
        if old is not None:
            if old.address == addr:
                return
            self._disconnect(pid)
        self._links[pid] = PeerLink(pid, addr, self._config, self.stats)

    def _disconnect(self, pid: int) -> None:  # under the lock
        link = self._links.pop(pid, None)
        if link is not None:
            link.close()
            self._retired = [x for x in self._retired if x.is_alive()] + [link]

    # ------------------------------------------------------------------ sending
    def send(self, messages: Sequence[Message]) -> None:
        """Send `messages` to their peers; never blocks (drops on overflow)."""
        if not self._running or not messages:
            return
        groups: dict[int, list[Message]] = {}
        for m in messages:
            groups.setdefault(m.to, []).append(m)
        links = self._links
        for pid, group in groups.items():
            link = links.get(pid)
            if link is None:
                self.stats.dropped_failed += len(group)
                continue
            if sum(len(m.entries) for m in group) > DIRECT_ENTRIES or any(
                m.type is MessageType.SNAP for m in group
            ):
                link.offer(group, None)  # the link's writer encodes it, beside our fsync
            else:
                link.offer(group, encode_frame(self.id, pid, group))

    # ------------------------------------------------------------------ receiving
    def _accept(self) -> None:
        listener = self._listener
        while listener is not None:
            try:
                conn, addr = listener.accept()
            except OSError:
                return  # closed by stop()
            thread = threading.Thread(
                target=self._serve, args=(conn, addr), name=f"raft-tcp-{self.id}-in", daemon=True
            )
            with self._lock:
                if not self._running:
                    conn.close()
                    return
                if len(self._inbound) >= MAX_INBOUND:  # a flood of connections: no thread each
                    conn.close()
                    continue
                self._inbound[thread] = conn
            thread.start()

    def _serve(self, conn: socket.socket, addr: tuple[str, int]) -> None:
        me = threading.current_thread()
        peer = f"ipv{6 if conn.family == socket.AF_INET6 else 4}:{addr[0]}:{addr[1]}"
        sock = conn
        sender = 0
        try:
            tune(conn)
            conn.settimeout(self.rpc_timeout + 3)
            if self._server_tls is not None:
                sock = self._server_tls.wrap_socket(conn, server_side=True)
                with self._lock:
                    self._inbound[me] = sock
                if negotiated_h2(sock):
                    raise GrpcPeer("the peer agreed on HTTP/2 in the TLS handshake")
            with sock.makefile("rb") as f:
                hello = read_hello(f)
                refusal = self._admit(sock, peer, hello.sender, hello.receiver, hello.token)
                sock.sendall(encode_answer(refusal))
                if refusal is not None:
                    return
                sender = hello.sender
                with self._lock:
                    old = self._latest.get(sender)
                    self._latest[sender] = sock
                if old is not None:
                    with contextlib.suppress(OSError):
                        old.shutdown(socket.SHUT_RDWR)
                sock.settimeout(None)
                while True:
                    from_id, to_id, messages = decode_batch(read_frame(f))
                    if from_id != sender or to_id != self.id:
                        raise WireError(f"a frame from {from_id} to {to_id} on {sender}'s link")
                    if sender not in self._addresses:  # removed while connected
                        self._admit(sock, peer, sender, to_id, hello.token)
                        return
                    handler = self._on_message
                    if handler is None:
                        return
                    for m in messages:
                        handler(m)
                    self.stats.received += len(messages)
        except GrpcPeer:
            self.stats.grpc_in += 1
            self.mismatch.inbound(addr[0], addr[1])
        except WireError as exc:
            self.stats.garbage += 1
            log.warning("raft connection dropped: not this protocol", peer=peer, why=str(exc))
        except (OSError, EOFError):
            pass  # the peer went away, or stop()
        finally:
            self._served(me, sender, sock)

    def _served(self, me: threading.Thread, sender: int, sock: socket.socket) -> None:
        """An inbound connection ended. If it was `sender`'s latest link to us (kill -9 closes
        a process's sockets at once), `sender` is reported unreachable: a follower of it
        campaigns at its next tick (domain `follower._leader_gone`). Not while we stop."""
        with self._lock:
            self._inbound.pop(me, None)
            gone = bool(sender) and self._latest.get(sender) is sock
            if gone:
                del self._latest[sender]
            gone = gone and self._running
        with contextlib.suppress(OSError):
            sock.close()
        if gone and self._config is not None:
            self._config.on_unreachable(sender)

    def _admit(
        self, sock: socket.socket, peer: str, sender: int, receiver: int, token: str | None
    ) -> str | None:
        """Why `sender` may not speak to this node (logged, counted, audited), or None."""
        context = SocketCallContext(sock, peer, token).as_grpc()
        claimed = str(sender)
        refusal = self.gate.check(context, claimed)
        reason = None if refusal is None else refusal.reason
        if reason is None and (sender not in self._addresses or sender == self.id):
            reason = f"node {sender} is not a member of this cluster"
        if reason is None and receiver != self.id:
            return f"wrong node: this is node {self.id}, not {receiver}"  # misrouted, no audit
        if reason is not None:
            self.gate.record(context, claimed, reason)
            self.stats.refused += 1
            return f"raft: refused, {reason}"
        return None
