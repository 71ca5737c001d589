"""`GrpcRaftTransport`: a `RaftTransport` over gRPC (grpcio's asyncio API) on its own thread.

Theory of operation. `start()` runs an asyncio event loop on a daemon thread; on it live the
gRPC server (the `Raft.Send` servicer hands each received message to `on_message`) and, per
peer, a channel, a bounded outbox (a deque) and a sender task. `send()` is called from the
Raft loop: it groups messages by destination and schedules them onto the event loop with
`call_soon_threadsafe` — it never blocks and never waits for the network. A sender task keeps
one long-lived client stream (`Raft.Stream`) open to its peer and writes each batch of up to
`max_batch` messages from its outbox onto it: no round trip per batch (a unary call per batch
cost ~1 ms of the commit path), and one stream per peer keeps that peer's messages in order.
When the outbox is full, new messages for that peer are dropped and counted (Raft retransmits
what matters). When a write fails or the stream ends (the peer went away), the batch is
dropped, the peer is reported unreachable (the leader then probes instead of streaming),
snapshots in the batch are reported lost, and the task backs off exponentially
(`backoff_initial` doubling up to `backoff_max`) before it opens a new stream; gRPC's channel
also reconnects on its own. A snapshot written to the stream is reported with ok=True (the
follower's reply then drives the leader, as after any append).

Failover (issue 21). Followers do not talk to each other until an election, so the first
PreVote from one survivor to the other may find the stream it opened long ago dead (the peer
restarted since): a write that fails on a stream opened earlier is tried once more on a new
stream before the batch is dropped and the sender backs off (a lost PreVote costs another
election timeout). gRPC's reconnect backoff is capped at 500 ms.

A peer's stream to us that ends (kill -9 closes its sockets at once) is reported as that
peer unreachable: a follower then campaigns at its next tick instead of after its election
timeout (docs/raft.md, failover). Only the sender's latest stream counts.

Membership: `add_peer` / `remove_peer` (called on the Raft loop as conf changes apply) update
the address book at once (copy-on-write, so `addresses` never sees a half-made change) and
open or close the peer's channel and sender task on the event loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import grpc
import grpc.aio
import structlog

from gpu_platform.adapters.cluster_identity import TOKEN_METADATA
from gpu_platform.adapters.grpc_bind import NO_PORT_REUSE, bind_port
from gpu_platform.adapters.member_gate import MemberGate
from gpu_platform.adapters.outbound.raft_grpc.codec import encode_message
from gpu_platform.adapters.outbound.raft_grpc.servicer import RaftServicer
from gpu_platform.adapters.outbound.raft_grpc.v1 import raft_pb2 as pb
from gpu_platform.adapters.outbound.raft_grpc.v1 import raft_pb2_grpc as pb_grpc
from gpu_platform.adapters.tls import TlsFiles
from gpu_platform.domain.consensus import Message, MessageType
from gpu_platform.domain.model.audit import AuditRecord
from gpu_platform.ports.outbound.raft import MessageHandler, SnapshotReport, UnreachableHandler

__all__ = ["GrpcRaftTransport", "TransportStats", "parse_peers"]

_MAX_MSG = 256 * 1024 * 1024  # bytes; snapshots travel in one message
_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", _MAX_MSG),
    ("grpc.max_receive_message_length", _MAX_MSG),
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 500),
    ("grpc.enable_retries", 0),
    # A peer cut off by the network (no RST, no FIN) must not hold a dead connection until
    # the kernel gives up (~15 min): ping after 2 s without reads, drop it 3 s later (this also
    # sets TCP_USER_TIMEOUT); the server side accepts such pings.
    ("grpc.keepalive_time_ms", 2000),
    ("grpc.keepalive_timeout_ms", 3000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 1000),
    ("grpc.http2.max_ping_strikes", 0),
]


def parse_peers(text: str) -> dict[int, str]:
    """`"1=127.0.0.1:7001,2=127.0.0.1:7002"` -> {1: "127.0.0.1:7001", 2: ...}."""
    peers: dict[int, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        node, _, addr = part.partition("=")
        if not addr:
            raise ValueError(f"peer {part!r} is not ID=HOST:PORT")
        peers[int(node)] = addr
    return peers


log = structlog.get_logger(__name__)


@dataclass(slots=True)
class TransportStats:
    """Counters (messages unless named otherwise)."""

    sent: int = 0
    received: int = 0
    dropped_overflow: int = 0
    dropped_failed: int = 0
    batches: int = 0
    failures: int = 0
    streams: int = 0  # streams opened (one per peer, again after each failure)
    rewrites: int = 0  # batches written again on a new stream after the old one failed
    refused: int = 0  # calls refused: not a member of this cluster (certificate, token, id)


@dataclass(slots=True)
class _Peer:
    id: int
    address: str
    outbox: collections.deque[Message] = field(default_factory=collections.deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    channel: grpc.aio.Channel | None = None
    task: asyncio.Task[None] | None = None


class GrpcRaftTransport:
    """A `RaftTransport` for node `node_id`, serving on `peers[node_id]` (or `listen`)."""

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
        backoff_max: float = 0.25,  # a restarted peer hears its leader again within this
        tls: TlsFiles | None = None,
        token: str | None = None,
        audit: Callable[[AuditRecord], None] | None = None,
    ) -> None:
        """`token`: the cluster token every message carries and every sender must present;
        with mTLS (`tls.ca`) a sender's certificate must be `gpu-platform://server/<its id>`
        (adapters.member_gate); `audit` records each refused sender."""
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
        self.tls = tls  # mTLS between servers when its `ca` is set (adapters.tls)
        self.token = token
        self._metadata = ((TOKEN_METADATA, token),) if token else ()
        mtls = tls is not None and tls.ca is not None
        self.gate = MemberGate("raft", "server", token=token, mtls=mtls, audit=audit)
        self.stats = TransportStats()
        self._on_message: MessageHandler | None = None
        self._on_unreachable: UnreachableHandler | None = None
        self._on_snapshot: SnapshotReport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: grpc.aio.Server | None = None
        self._peers: dict[int, _Peer] = {}
        self._closing: set[asyncio.Task[None]] = set()  # channel closes in flight
        self._inbound: dict[int, object] = {}  # sender -> its latest stream to us
        self.bound_port = 0

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
        """Serve and connect; returns once the server listens (raises if it cannot bind)."""
        self._on_message = on_message
        self._on_unreachable = on_unreachable
        self._on_snapshot = on_snapshot
        loop = asyncio.new_event_loop()
        self._loop = loop
        started = threading.Event()
        error: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._astart())
            except BaseException as exc:  # reported to start()'s caller
                error.append(exc)
                started.set()
                return
            started.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, name=f"raft-grpc-{self.id}", daemon=True)
        self._thread.start()
        started.wait()
        if error:
            raise error[0]

    async def _astart(self) -> None:
        server = grpc.aio.server(options=[*_CHANNEL_OPTIONS, NO_PORT_REUSE])
        pb_grpc.add_RaftServicer_to_server(RaftServicer(self), server)  # type: ignore[no-untyped-call]
        creds = None if self.tls is None else self.tls.grpc_server_credentials()
        self.bound_port = bind_port(server, self.listen, "Raft", creds)
        own = self._addresses.get(self.id, "")
        if own.endswith(":0"):  # asked for any free port: peers learn the one we got
            self._addresses[self.id] = f"{own[:-2]}:{self.bound_port}"
        await server.start()
        self._server = server
        for pid, addr in self._addresses.items():
            self._connect(pid, addr)

    def _connect(self, pid: int, addr: str) -> None:
        """On the event loop: a channel and a sender task for `pid` (replacing an old one)."""
        if pid == self.id:
            return
        old = self._peers.get(pid)
        if old is not None:
            if old.address == addr:
                return
            self._disconnect(pid)
        peer = _Peer(pid, addr)
        if self.tls is None:
            peer.channel = grpc.aio.insecure_channel(addr, options=_CHANNEL_OPTIONS)
        else:
            peer.channel = grpc.aio.secure_channel(
                addr, self.tls.grpc_channel_credentials(), options=_CHANNEL_OPTIONS
            )
        peer.task = asyncio.get_running_loop().create_task(self._sender(peer))
        self._peers[pid] = peer

    def _disconnect(self, pid: int) -> None:
        """On the event loop: stop sending to `pid` and close its channel."""
        peer = self._peers.pop(pid, None)
        if peer is None:
            return
        self.stats.dropped_failed += len(peer.outbox)
        peer.outbox.clear()
        if peer.task is not None:
            peer.task.cancel()
        if peer.channel is not None:
            self._closing.add(asyncio.get_running_loop().create_task(peer.channel.close()))
            self._closing = {t for t in self._closing if not t.done()}

    # ------------------------------------------------------------------ membership
    def add_peer(self, node_id: int, address: str) -> None:
        """Add (or re-address) peer `node_id` at `address`; idempotent."""
        if node_id == self.id or self._addresses.get(node_id) == address:
            return
        self._addresses = {**self._addresses, node_id: address}
        self._on_loop(self._connect, node_id, address)

    def remove_peer(self, node_id: int) -> None:
        """Forget peer `node_id`: drop its queue and close its channel; idempotent."""
        if node_id == self.id or node_id not in self._addresses:
            return
        self._addresses = {i: a for i, a in self._addresses.items() if i != node_id}
        self._on_loop(self._disconnect, node_id)

    def _on_loop(self, fn: Callable[..., None], *args: object) -> None:
        loop = self._loop
        if loop is None:
            return  # not started (or stopped): `_astart` connects from the address book
        with contextlib.suppress(RuntimeError):  # the loop closed under us: stopping
            loop.call_soon_threadsafe(fn, *args)

    def stop(self) -> None:
        """Stop serving and sending (idempotent); queued messages are dropped."""
        loop, thread = self._loop, self._thread
        self._on_message = None
        if loop is None or thread is None:
            return
        self._loop = None
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(self._astop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        with contextlib.suppress(RuntimeError):
            loop.close()

    async def _astop(self) -> None:
        for peer in self._peers.values():
            if peer.task is not None:
                peer.task.cancel()
        for peer in self._peers.values():
            if peer.task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await peer.task
            if peer.channel is not None:
                await peer.channel.close()
        for closing in list(self._closing):
            with contextlib.suppress(Exception):
                await closing
        if self._server is not None:
            await self._server.stop(grace=None)
        # The server's cancelled stream handlers finish on this loop: let them, before it closes.
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if others:
            await asyncio.wait(others, timeout=1.0)

    def _peer_gone(self, peer: int) -> None:
        """`peer`'s latest stream to us ended (its process went away, or it opened no new
        one): reported as unreachable, which a follower of `peer` takes as its leader gone
        (domain `follower._leader_gone`). Not while we stop."""
        if self._loop is not None and self._on_unreachable is not None:
            self._on_unreachable(peer)

    # ------------------------------------------------------------------ sending
    def send(self, messages: Sequence[Message]) -> None:
        """Queue `messages` for their peers; never blocks (drops on overflow)."""
        loop = self._loop
        if loop is None or not messages:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed under us: stopping
            loop.call_soon_threadsafe(self._enqueue, tuple(messages))

    def _enqueue(self, messages: tuple[Message, ...]) -> None:
        for m in messages:
            peer = self._peers.get(m.to)
            if peer is None:
                self.stats.dropped_failed += 1
                continue
            if len(peer.outbox) >= self.outbox_limit:
                self.stats.dropped_overflow += 1
                continue
            peer.outbox.append(m)
            peer.wake.set()

    async def _sender(self, peer: _Peer) -> None:
        assert peer.channel is not None
        stub = pb_grpc.RaftStub(peer.channel)  # type: ignore[no-untyped-call]
        backoff = self.backoff_initial
        call: grpc.aio.StreamUnaryCall[pb.Batch, pb.Ack] | None = None
        try:
            while True:
                await peer.wake.wait()
                peer.wake.clear()
                while peer.outbox:
                    n = min(len(peer.outbox), self.max_batch)
                    batch = [peer.outbox.popleft() for _ in range(n)]
                    request = pb.Batch(
                        from_id=self.id, to_id=peer.id, messages=[encode_message(m) for m in batch]
                    )
                    call = await self._write(stub, call, request)
                    ok = call is not None
                    self.stats.batches += 1
                    self._report_snapshots(peer.id, batch, ok)
                    if ok:
                        self.stats.sent += len(batch)
                        backoff = self.backoff_initial
                        continue
                    self.stats.failures += 1
                    self.stats.dropped_failed += len(batch)
                    if self._on_unreachable is not None:
                        self._on_unreachable(peer.id)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, self.backoff_max)
        finally:
            if call is not None:
                call.cancel()

    async def _write(
        self,
        stub: pb_grpc.RaftStub,
        call: grpc.aio.StreamUnaryCall[pb.Batch, pb.Ack] | None,
        request: pb.Batch,
    ) -> grpc.aio.StreamUnaryCall[pb.Batch, pb.Ack] | None:
        """Write `request` on `call` (a new stream if it has none or it ended); a failure on a
        stream opened before (it may have died with a restart of the peer) is tried once more
        on a new stream. Returns the stream written on, or None (failed)."""
        for attempt in range(2):
            fresh = call is None or call.done()
            try:
                if call is None or call.done():
                    call = stub.Stream(metadata=self._metadata)
                    self.stats.streams += 1
                await call.write(request)
                return call
            except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                if call is not None:
                    call.cancel()
                call = None
                if fresh or attempt:
                    return None
                self.stats.rewrites += 1
        return None

    def _report_snapshots(self, peer: int, batch: list[Message], ok: bool) -> None:
        report = self._on_snapshot
        if report is None:
            return
        for m in batch:
            if m.type is MessageType.SNAP:
                report(peer, ok)
