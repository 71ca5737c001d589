"""`AgentGrpcServer`: the server end of the agents' streams (grpcio asyncio, own thread).

Each `Connect` call becomes an `AgentSession` handed to the `AgentHub`. The event loop only
moves messages: launch answers, log data, reset outcomes and injection answers resolve the
hub's waiting futures directly (they never block), while hellos, heartbeats, findings and
exits — which reach the control plane and may wait for a Raft commit — run in order per stream
on a worker pool, so a slow commit never stalls the loop or another agent's launch answer. A
server that does not lead ends the call with FAILED_PRECONDITION and the leader's agent address
in the trailing metadata `gpu-platform-leader`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import structlog

from gpu_platform.adapters.agent_wire.batches import agent_messages
from gpu_platform.adapters.agent_wire.codec import (
    exit_from_pb,
    finding_from_json,
    node_from_json,
)
from gpu_platform.adapters.agent_wire.v1 import agent_pb2 as pb
from gpu_platform.adapters.agent_wire.v1 import agent_pb2_grpc as pb_grpc
from gpu_platform.adapters.grpc_bind import NO_PORT_REUSE, bind_port
from gpu_platform.adapters.inbound.grpc.agent_stream_work import (
    CLOSE,
    ExitBatches,
    StreamSession,
    bind,
    chain,
    outgoing,
)
from gpu_platform.adapters.member_gate import MemberGate, peer_certificate_digest
from gpu_platform.adapters.tls import TlsFiles
from gpu_platform.application.agent_hub import AgentHub, AttemptRef, NotAccepting
from gpu_platform.domain.model.audit import AuditRecord

__all__ = [
    "KEEPALIVE_CLIENT_OPTIONS",
    "KEEPALIVE_SERVER_OPTIONS",
    "LEADER_METADATA",
    "AgentGrpcServer",
    "AgentServerBase",
    "AgentServicer",
]

LEADER_METADATA = "gpu-platform-leader"

#: The agent pings a server it has read nothing from for 5 s and drops the stream when no answer
#: comes in 5 s more (TCP_USER_TIMEOUT as well): a leader cut off by the network sends no RST,
#: and without this the agent would wait on the dead stream for the kernel's ~15 minutes.
KEEPALIVE_CLIENT_OPTIONS = [
    ("grpc.keepalive_time_ms", 5000),
    ("grpc.keepalive_timeout_ms", 5000),
    ("grpc.http2.max_pings_without_data", 0),
]
#: ... and the server accepts those pings (by default it would close a stream pinged this often).
AGENT_MAX_MESSAGE_BYTES = 4 << 20  # one agent stream message (a reconcile of a big node fits)
KEEPALIVE_SERVER_OPTIONS = [
    ("grpc.max_receive_message_length", AGENT_MAX_MESSAGE_BYTES),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 4000),
    ("grpc.http2.max_ping_strikes", 0),
]
log = structlog.get_logger(__name__)


class AgentServicer(pb_grpc.AgentServiceServicer):
    """One agent stream's conversation, on a gRPC call or on a framed TCP connection
    (`agent_tcp_server`, which hands it a context with the same methods)."""

    def __init__(
        self,
        hub: AgentHub,
        pool: ThreadPoolExecutor,
        server_id: int,
        heartbeat_s: float,
        lease_s: float,
        gate: MemberGate,
    ) -> None:
        self._gate = gate
        self._claims: dict[str, tuple[str, Any]] = {}  # node -> (identity, live session)
        self._claims_lock = threading.Lock()
        self._hub = hub
        self._pool = pool
        self._server_id = server_id
        self._heartbeat_s = heartbeat_s
        self._lease_s = lease_s

    async def Connect(  # noqa: N802
        self, request_iterator: AsyncIterator[pb.AgentMessage], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ServerMessage]:
        loop = asyncio.get_running_loop()
        first = await anext(aiter(request_iterator), None)
        if first is None or first.WhichOneof("kind") != "hello":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "hello: must come first")
            return
        hello = first.hello
        refusal = self._gate.check(context, hello.node)
        if refusal is not None:
            self._gate.record(context, hello.node, refusal.reason)
            reason = refusal.reason
            if refusal.code is grpc.StatusCode.UNAUTHENTICATED:
                reason += " (give the agent this cluster's token: GPU_PLATFORM_CLUSTER_TOKEN"
                reason += " or cluster_token_file)"
            await context.abort(refusal.code, f"agent refused: {reason}")
            return
        try:
            node = node_from_json(hello.node_json)
        except (ValueError, KeyError, TypeError) as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"hello.node_json: {exc}")
            return
        if node.name != hello.node:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"hello.node_json: names node {node.name!r}, hello.node {hello.node!r}",
            )
            return
        session = StreamSession(node.name, loop, hello.batches)
        identity = f"{peer_certificate_digest(context)}/{hello.instance}"
        why = self.claim(node.name, identity, session)
        if why is not None:
            self._gate.record(context, node.name, why)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"agent refused: {why}")
            return
        running = tuple(AttemptRef(a.job_id, a.epoch, a.rank, a.attempt) for a in hello.running)
        exited = tuple((e.seq, exit_from_pb(e)) for e in hello.exited)
        try:
            await loop.run_in_executor(self._pool, self._hub.open, session, node, running, exited)
        except NotAccepting as exc:
            self._release(session)
            context.set_trailing_metadata(((LEADER_METADATA, exc.leader),))
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
            return
        except Exception as exc:  # refused by the control plane (e.g. a conflicting node)
            self._release(session)
            log.warning("agent refused", node=node.name, error=str(exc))
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"agent refused: {exc}")
            return
        reader = asyncio.create_task(self._read(request_iterator, session, loop))
        waiter: asyncio.Future[Any] | None = None
        try:
            welcome = pb.Welcome(
                server_id=self._server_id,
                heartbeat_interval_s=self._heartbeat_s,
                lease_s=self._lease_s,
                batches=True,
            )
            yield pb.ServerMessage(welcome=welcome)
            while True:
                if not session.ready.is_set():
                    waiter = asyncio.ensure_future(session.ready.wait())
                    done, _ = await asyncio.wait(
                        {waiter, reader}, return_when=asyncio.FIRST_COMPLETED
                    )
                    if waiter not in done:
                        waiter.cancel()
                        break  # the agent hung up
                items = session.take()
                end = next((i for i, item in enumerate(items) if item is CLOSE), None)
                for msg in outgoing(items if end is None else items[:end], session.batches):
                    yield msg
                if end is not None:
                    if session.leader:
                        context.set_trailing_metadata(((LEADER_METADATA, session.leader),))
                    break
        finally:
            reader.cancel()
            if waiter is not None:  # the call was cancelled while it waited
                waiter.cancel()
            self._release(session)
            self._hub.closed(session)

    def claim(self, node: str, identity: str, session: Any) -> str | None:
        """Hold `node` for `session` (it has `last_seen`, a monotonic time) unless an agent of
        another `identity` holds it and spoke within three heartbeat intervals: why not, else
        None. Also called by the in-process agent's link, from its own thread."""
        with self._claims_lock:
            held = self._claims.get(node)
            silent = (
                held is not None and time.monotonic() - held[1].last_seen > 3 * self._heartbeat_s
            )
            if held is not None and held[0] != identity and not silent:
                return (
                    f"node {node} is connected from another agent (another certificate or "
                    "agent process); a second one cannot claim it while the first is live"
                )
            self._claims[node] = (identity, session)
            return None

    def _release(self, session: Any) -> None:
        """`session` no longer holds its node (unless another session has taken it over)."""
        with self._claims_lock:
            held = self._claims.get(session.node)
            if held is not None and held[1] is session:
                del self._claims[session.node]

    async def _read(
        self,
        requests: AsyncIterator[pb.AgentMessage],
        session: StreamSession,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """Dispatch the agent's messages; the slow kinds in order on the worker pool, but
        exits apart from them, in batches (`ExitBatches`): a batch waits for its finishes'
        commit, and exits that wait together are committed together
        (`application.control.finishing`)."""
        tail: asyncio.Future[None] | None = None
        hub = self._hub
        exits = ExitBatches(loop, self._pool, hub, session)
        async for received in requests:
            session.last_seen = time.monotonic()
            for msg in agent_messages(received):
                kind = msg.WhichOneof("kind")
                call: Callable[[], None] | None = None
                if kind == "launched":
                    hub.launched(session, msg.launched.request_id, msg.launched.error)
                elif kind == "log":
                    hub.log_data(session, msg.log.request_id, msg.log.data, msg.log.error)
                elif kind == "reset_result":
                    r = msg.reset_result
                    hub.reset_done(session, r.request_id, r.error)
                elif kind == "injected":
                    i = msg.injected
                    hub.injected(session, i.request_id, tuple(i.lines), i.error)
                elif kind == "heartbeat":  # acknowledged once recorded: that renews the lease
                    call = bind(_beat, hub, session, msg.heartbeat.seq)
                elif kind == "health":
                    call = bind(hub.finding, session, finding_from_json(msg.health.finding_json))
                elif kind == "exit":
                    exits.add(msg.exit.seq, exit_from_pb(msg.exit))
                if call is not None:
                    tail = chain(loop, self._pool, tail, call)
        if tail is not None:
            await tail
        await exits.drained()


def _beat(hub: AgentHub, session: StreamSession, seq: int) -> None:
    if hub.heartbeat(session):  # not while the leader may have been superseded
        session.send_heartbeat_ack(seq)


class AgentServerBase:
    """What both agent servers share (`AgentGrpcServer`, `agent_tcp_server.AgentTcpServer`):
    the servicer and its gate, its worker pool, and an event loop on a thread of its own.
    Admits members only (adapters.member_gate): the cluster `token`; with mTLS (`tls.ca`) an
    agent certificate naming the node; a node held by a live stream of another agent
    (certificate or agent process; live: it spoke within three heartbeat intervals) is
    refused. `audit` records refusals."""

    THREAD = "agent-server"

    def __init__(
        self,
        hub: AgentHub,
        host: str,
        port: int,
        *,
        server_id: int = 0,
        heartbeat_s: float = 2.0,
        lease_s: float = 0.0,
        token: str | None = None,
        tls: TlsFiles | None = None,
        workers: int = 16,
        local_socket: Path | None = None,
        audit: Callable[[AuditRecord], None] | None = None,
    ) -> None:
        self.hub = hub  # the in-process agent's link reaches it directly (`claim`, `release`)
        self._host = host
        self.port = port
        self._socket = local_socket  # also on this unix socket (mode 0600), without TLS
        self._tls = tls
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agent-msg")
        mtls = tls is not None and tls.ca is not None
        self.gate = MemberGate("agent", "agent", token=token, mtls=mtls, audit=audit)
        self._servicer = AgentServicer(hub, self._pool, server_id, heartbeat_s, lease_s, self.gate)
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None

    def claim(self, node: str, identity: str, session: Any) -> str | None:
        """Hold `node` for an in-process link's `session`, as a stream's hello does (the same
        rule: refused while another live agent holds it): why not, else None."""
        return self._servicer.claim(node, identity, session)

    def release(self, session: Any) -> None:
        self._servicer._release(session)

    def start(self) -> None:
        started = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self._astart())
            except BaseException as exc:
                errors.append(exc)
                started.set()
                return
            started.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name=self.THREAD, daemon=True)
        self._thread.start()
        started.wait(30)
        if errors:
            raise errors[0]

    async def _astart(self) -> None:
        raise NotImplementedError

    async def _halt(self, grace_s: float) -> None:
        raise NotImplementedError

    def stop(self, grace_s: float = 1.0) -> None:
        if self._thread is None:
            return
        with contextlib.suppress(RuntimeError, TimeoutError):
            halting = asyncio.run_coroutine_threadsafe(self._halt(grace_s), self._loop)
            halting.result(timeout=grace_s + 10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._pool.shutdown(wait=False, cancel_futures=True)


class AgentGrpcServer(AgentServerBase):
    """Serves AgentService on `host:port` from its own event-loop thread (and, for an agent in
    the same process when TLS is on, on a unix socket only this user can open)."""

    THREAD = "agent-grpc"
    _server: grpc.aio.Server | None = None

    async def _astart(self) -> None:
        server = grpc.aio.server(options=[*KEEPALIVE_SERVER_OPTIONS, NO_PORT_REUSE])
        pb_grpc.add_AgentServiceServicer_to_server(self._servicer, server)  # type: ignore[no-untyped-call]
        creds = None if self._tls is None else self._tls.grpc_server_credentials()
        self.port = bind_port(server, f"{self._host}:{self.port}", "agent API", creds)
        if self._socket is not None:
            self._socket.unlink(missing_ok=True)  # left by a killed server
            server.add_insecure_port(f"unix:{self._socket}")
        await server.start()
        if self._socket is not None:
            os.chmod(self._socket, 0o600)
        self._server = server

    async def _halt(self, grace_s: float) -> None:
        if self._server is not None:
            await self._server.stop(grace_s)
