"""`PeerLink`: one outbound TCP connection to one peer, written from the caller's thread.

Theory of operation. `offer(frame)` is called on the Raft loop with an encoded frame. When the
link has a live connection and nothing queued or in flight, the frame is written straight to
the (non-blocking) socket on the caller's thread: no hand-off to another thread on the commit
path. What cannot be written at once (the socket buffer is full, the connection is down, a
snapshot, a frame behind queued ones) goes to a bounded outbox of messages, and the link's
writer thread sends it: it connects (TCP, TLS, hello, answer), writes the pending rest of a
half-written frame first, then batches of up to `max_batch` queued messages, and gives the
socket back to the fast path once the outbox is empty. Only one side writes at a time (`busy`),
so frames never interleave and a peer's messages stay in order.

Failures. Before each fast write the socket is polled: a readable outbound socket means the
peer closed it (it never sends on this connection after its answer), so the frame goes to the
writer, which reconnects. A write that fails on a connection opened earlier is tried once more
on a new one (the peer may have restarted: a lost PreVote would cost an election timeout);
otherwise the frame and everything queued are dropped (`dropped_failed`), the peer is reported
unreachable, snapshots among them are reported lost, and the writer backs off (doubling from
`backoff_initial` to `backoff_max`) before it connects again. A full outbox drops new messages
(`dropped_overflow`). Callbacks come from the writer thread only.
"""

from __future__ import annotations

import collections
import contextlib
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from gpu_platform.adapters.outbound.raft_tcp.mismatch import TransportMismatch, negotiated_h2
from gpu_platform.adapters.outbound.raft_tcp.wire import (
    MAX_FRAME,
    GrpcPeer,
    encode_frame,
    encode_hello,
    read_answer,
)
from gpu_platform.adapters.tcp_security import tune
from gpu_platform.domain.consensus import Message, MessageType

__all__ = ["LinkConfig", "LinkStats", "PeerLink", "split_address"]

log = structlog.get_logger(__name__)
_WOULD_BLOCK = (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError)
_DEAD = select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP | select.POLLNVAL


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


@dataclass(slots=True)
class LinkStats:
    """Counters shared by the links of one transport (messages unless named otherwise)."""

    sent: int = 0
    received: int = 0
    dropped_overflow: int = 0
    dropped_failed: int = 0
    batches: int = 0  # frames written
    direct: int = 0  # frames written by send() itself, on the caller's thread
    failures: int = 0
    streams: int = 0  # connections opened (one per peer, again after each failure)
    rewrites: int = 0  # frames written again on a new connection after the old one failed
    refused: int = 0  # inbound connections refused: not a member of this cluster
    garbage: int = 0  # inbound connections dropped for bytes that are not this protocol
    grpc_in: int = 0  # inbound connections refused: the peer speaks the gRPC Raft transport
    grpc_out: int = 0  # connections dialed to a peer that answered as a gRPC Raft transport


@dataclass(frozen=True, slots=True)
class LinkConfig:
    node_id: int
    token: str | None
    tls: ssl.SSLContext | None
    outbox_limit: int
    max_batch: int
    timeout: float  # connect, handshake and a write that makes no progress
    backoff_initial: float
    backoff_max: float
    on_unreachable: Callable[[int], None]
    on_snapshot: Callable[[int, bool], None]
    mismatch: TransportMismatch = field(default_factory=TransportMismatch)


@dataclass(slots=True)
class _Pending:
    data: bytes
    messages: int
    snapshots: int
    offset: int = 0
    retried: bool = False


@dataclass(slots=True)
class _Failed:
    messages: int = 0
    snapshots: int = 0
    frames: list[_Pending] = field(default_factory=list)


class PeerLink:
    def __init__(self, peer: int, address: str, config: LinkConfig, stats: LinkStats) -> None:
        self.id = peer
        self.address = address
        self._c = config
        self._stats = stats
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._closed = threading.Event()
        self._outbox: collections.deque[Message] = collections.deque()
        self._pending: _Pending | None = None  # a frame that must go before the outbox
        self._sock: socket.socket | None = None
        self._poll: select.poll | None = None
        self._busy = False  # the writer thread owns the socket
        self._thread = threading.Thread(
            target=self._run, name=f"raft-tcp-{config.node_id}->{peer}", daemon=True
        )
        self._thread.start()

    # ------------------------------------------------------------------ the caller's side
    def offer(self, messages: list[Message], frame: bytes | None) -> None:
        """Send `messages` (already encoded as `frame`, or None for a snapshot); never blocks."""
        with self._lock:
            if self._closed.is_set():
                self._stats.dropped_failed += len(messages)
                return
            sock, poll = self._sock, self._poll
            if (
                frame is not None
                and sock is not None
                and poll is not None
                and not self._busy
                and not self._outbox
                and self._pending is None
                and len(frame) <= MAX_FRAME
            ):
                if poll.poll(0):  # the peer closed it: the writer reconnects and sends
                    self._drop_socket()
                    self._pending = _Pending(frame, len(messages), 0)
                    self._wake.notify()
                    return
                try:
                    n = sock.send(frame)
                except _WOULD_BLOCK:
                    n = 0
                except OSError:  # failed on an old connection: once more on a new one
                    self._drop_socket()
                    self._pending = _Pending(frame, len(messages), 0, retried=True)
                    self._stats.rewrites += 1
                    self._wake.notify()
                    return
                if n == len(frame):
                    self._stats.sent += len(messages)
                    self._stats.batches += 1
                    self._stats.direct += 1
                    return
                self._pending = _Pending(frame, len(messages), 0, offset=n)
                self._wake.notify()
                return
            for m in messages:
                if len(self._outbox) >= self._c.outbox_limit:
                    self._stats.dropped_overflow += 1
                else:
                    self._outbox.append(m)
            self._wake.notify()

    def close(self) -> None:
        """Stop sending: drop what is queued, end the writer thread (see `join`)."""
        with self._lock:
            self._closed.set()
            self._stats.dropped_failed += len(self._outbox)
            self._outbox.clear()
            self._pending = None
            self._drop_socket()
            self._wake.notify()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _drop_socket(self) -> None:  # under the lock
        sock, self._sock, self._poll = self._sock, None, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    # ------------------------------------------------------------------ the writer thread
    def _run(self) -> None:
        backoff = self._c.backoff_initial
        while not self._closed.is_set():
            with self._lock:
                while not self._closed.is_set() and not self._outbox and self._pending is None:
                    self._busy = False
                    self._wake.wait()
                if self._closed.is_set():
                    return
                self._busy = True
                sock = self._sock
            fresh = sock is None
            if sock is None:
                sock = self._connect()
                if sock is None:
                    self._fail(None)
                    self._closed.wait(backoff)
                    backoff = min(backoff * 2, self._c.backoff_max)
                    continue
            if self._flush(sock, fresh):
                backoff = self._c.backoff_initial
            elif not self._closed.is_set():
                self._closed.wait(backoff)
                backoff = min(backoff * 2, self._c.backoff_max)

    def _connect(self) -> socket.socket | None:
        host, port = split_address(self.address)
        sock: socket.socket | None = None
        try:
            sock = socket.create_connection((host, port), timeout=self._c.timeout)
            tune(sock)
            if self._c.tls is not None:
                sock = self._c.tls.wrap_socket(sock, server_hostname=host)
                if negotiated_h2(sock):
                    raise GrpcPeer("the peer agreed on HTTP/2 in the TLS handshake")
            sock.sendall(encode_hello(self._c.node_id, self.id, self._c.token))
            with sock.makefile("rb") as f:  # nothing follows the answer
                refusal = read_answer(f)
            if refusal is not None:
                log.warning("raft peer refused this node", peer=self.id, why=refusal)
                sock.close()
                return None
            sock.setblocking(False)
        except GrpcPeer:  # a server of this cluster on the other transport: say so, retry
            self._stats.grpc_out += 1
            self._c.mismatch.outbound(self.id, self.address)
            if sock is not None:
                sock.close()
            return None
        except (OSError, EOFError, ValueError):  # down, not listening, not a peer: retried
            if sock is not None:
                sock.close()
            return None
        poll = select.poll()
        poll.register(sock, select.POLLIN | select.POLLPRI)
        with self._lock:
            if self._closed.is_set():
                sock.close()
                return None
            self._sock, self._poll = sock, poll
        self._stats.streams += 1
        return sock

    def _flush(self, sock: socket.socket, fresh: bool) -> bool:
        """Write the pending frame and the outbox; False after a failure (already handled)."""
        while True:
            with self._lock:
                if self._closed.is_set():
                    return False
                pending = self._pending
                if pending is None:
                    if not self._outbox:
                        self._busy = False
                        return True
                    batch = self._next_batch()
            if pending is None:  # encoded without the lock: send() is not held up meanwhile
                snaps = sum(1 for m in batch if m.type is MessageType.SNAP)
                frame = encode_frame(self._c.node_id, self.id, batch)
                pending = _Pending(frame, len(batch), snaps)
                with self._lock:
                    self._pending = pending
            if self._write(sock, pending):
                with self._lock:
                    self._pending = None
                    self._stats.sent += pending.messages
                    self._stats.batches += 1
                for _ in range(pending.snapshots):
                    self._c.on_snapshot(self.id, True)
                continue
            with self._lock:
                if self._sock is sock:
                    self._drop_socket()
            if not fresh and not pending.retried and len(pending.data) <= MAX_FRAME:
                pending.retried, pending.offset = True, 0
                self._stats.rewrites += 1
                return True  # the loop connects again and writes it first
            self._fail(pending)
            return False

    def _next_batch(self) -> list[Message]:  # under the lock
        batch: list[Message] = []
        while self._outbox and len(batch) < self._c.max_batch:
            m = self._outbox[0]
            if m.type is MessageType.SNAP and batch:
                break  # a snapshot travels alone
            batch.append(self._outbox.popleft())
            if m.type is MessageType.SNAP:
                break
        return batch

    def _write(self, sock: socket.socket, p: _Pending) -> bool:
        if len(p.data) > MAX_FRAME:
            log.warning("raft frame over the cap dropped", peer=self.id, size=len(p.data))
            return False
        view = memoryview(p.data)
        poll = select.poll()
        poll.register(sock, select.POLLOUT)
        deadline = time.monotonic() + self._c.timeout
        while p.offset < len(view):
            if self._closed.is_set():
                return False
            try:
                n = sock.send(view[p.offset :])
            except _WOULD_BLOCK:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                poll.poll(min(left, 0.2) * 1000)
                continue
            except OSError:
                return False
            if n:
                p.offset += n
                deadline = time.monotonic() + self._c.timeout
        return True

    def _fail(self, pending: _Pending | None) -> None:
        """Drop `pending` and the outbox; report the peer unreachable and snapshots lost."""
        with self._lock:
            failed = _Failed()
            if self._pending is not None and self._pending is not pending:
                pending_now = self._pending
                failed.messages += pending_now.messages
                failed.snapshots += pending_now.snapshots
            self._pending = None
            if pending is not None:
                failed.messages += pending.messages
                failed.snapshots += pending.snapshots
            failed.messages += len(self._outbox)
            failed.snapshots += sum(1 for m in self._outbox if m.type is MessageType.SNAP)
            self._outbox.clear()
            self._stats.failures += 1
            self._stats.dropped_failed += failed.messages
        if self._closed.is_set():
            return
        self._c.on_unreachable(self.id)
        for _ in range(failed.snapshots):
            self._c.on_snapshot(self.id, False)
