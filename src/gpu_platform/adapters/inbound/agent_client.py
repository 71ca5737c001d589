"""`AgentClient`: the agent's end of its stream to the leader (grpcio asyncio, own thread).

It dials the servers in turn; a server that does not lead answers FAILED_PRECONDITION with
the leader's address in `gpu-platform-leader`, which is dialled next; a server that says nothing
for three heartbeat intervals (cut off, stopped) is given up and the next one dialled, so the
agent finds a new leader well within its lease. While a stream is up it
sends a heartbeat every interval the server asked for (Welcome) and renews the agent's lease
from the sending time of each heartbeat the leader acknowledges; forwards the agent's exits and
findings, and carries out the leader's launches, stops, log reads, GPU resets and fault
scripts (blocking agent calls run on a small pool, never on the event loop). The stream is a
gRPC call, or with `transport="tcp"` a framed connection (`FramedCall`, the servers'
`agent_transport = tcp`): the same messages and rules on both. When the stream
breaks, it backs off (`backoff_initial_s` doubling up to `backoff_max_s`) and dials again; the
agent's unacknowledged exits go out again in the next hello.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import grpc
import grpc.aio
import structlog

from gpu_platform.adapters.agent_wire.batches import pack_agent, server_messages
from gpu_platform.adapters.agent_wire.codec import (
    exit_to_pb,
    finding_to_json,
    node_to_json,
    spec_from_json,
)
from gpu_platform.adapters.agent_wire.v1 import agent_pb2 as pb
from gpu_platform.adapters.agent_wire.v1 import agent_pb2_grpc as pb_grpc
from gpu_platform.adapters.cluster_identity import TOKEN_METADATA
from gpu_platform.adapters.inbound.agent_tcp_call import FramedCall
from gpu_platform.adapters.inbound.grpc.agent_service import (
    KEEPALIVE_CLIENT_OPTIONS,
    LEADER_METADATA,
)
from gpu_platform.adapters.inbound.local_agent_link import LocalAgentLink
from gpu_platform.application.agent import Agent, ExitNotice, Outgoing
from gpu_platform.application.agent_hub import NotAccepting

__all__ = ["AgentClient"]

log = structlog.get_logger(__name__)

#: A server that has not welcomed the agent this long after the dial is given up (a
#: cut-off or stopped server answers nothing, and TCP keepalive would take far longer).
WELCOME_TIMEOUT_S = 5.0
#: Heartbeat intervals without a word from the server before the agent dials another: it must
#: find the new leader well within its lease, or its tasks are fenced.
SILENT_BEATS = 3


class _Silence:
    """Abandons a stream on which the server has said nothing for `limit_s` seconds."""

    def __init__(self, call: grpc.aio.StreamStreamCall | FramedCall, limit_s: float) -> None:
        self._call = call
        self.limit_s = limit_s
        self.heard = time.monotonic()
        self.abandoned = False

    def hear(self) -> None:
        self.heard = time.monotonic()

    async def watch(self) -> None:
        while time.monotonic() - self.heard <= self.limit_s:
            await asyncio.sleep(0.1)
        self.abandoned = True
        self._call.cancel()


def _keeper(work: set[asyncio.Future[None]]) -> Callable[[Awaitable[None]], None]:
    """Runs a coroutine as a task held in `work` until it is done (a task needs a reference)."""

    def keep(coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        work.add(task)
        task.add_done_callback(work.discard)

    return keep


class AgentClient:
    """Keeps `agent` connected to the leader among `servers` (host:port of their agent APIs)."""

    def __init__(
        self,
        agent: Agent,
        servers: Sequence[str],
        *,
        credentials: grpc.ChannelCredentials | None = None,
        backoff_initial_s: float = 0.1,
        backoff_max_s: float = 2.0,
        loop: asyncio.AbstractEventLoop | None = None,
        pool: ThreadPoolExecutor | None = None,
        token: str | None = None,
        local: LocalAgentLink | None = None,
        transport: str = "grpc",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`loop`/`pool`: run on a shared event loop (already running on its own thread) and
        worker pool instead of owning them — many simulated agents in one process. `local`:
        this process's own server, reached without gRPC at `local.target`. `transport`: grpc
        (`credentials` for TLS) or tcp (`tls`, a client context: `tcp_security`)."""
        if not servers:
            raise ValueError("servers: at least one host:port is needed")
        if transport not in ("grpc", "tcp"):
            raise ValueError(f"transport: grpc or tcp, not {transport!r}")
        self._agent = agent
        self._transport = transport
        self._tls = tls
        self._token = token
        self._metadata = ((TOKEN_METADATA, token),) if token else ()
        self.instance = secrets.token_hex(8)  # sent in every hello (agent.proto Hello.instance)
        self._servers = list(servers)
        self._credentials = credentials
        self._backoff = (backoff_initial_s, backoff_max_s)
        self._shared = loop is not None
        self._loop = loop or asyncio.new_event_loop()
        self._pool = pool or ThreadPoolExecutor(max_workers=4, thread_name_prefix="agent-work")
        self._thread: threading.Thread | None = None
        self._task: asyncio.Future[None] | None = None
        self._stopping = False
        self.connected_to = ""  # the server of the current stream ('' while none)
        self.streams = 0  # streams opened so far
        self._beats = itertools.count(1)
        self._sent: dict[int, float] = {}  # heartbeat seq -> monotonic time it was queued
        self._local = local

    def start(self) -> None:
        if self._shared:
            self._task = asyncio.run_coroutine_threadsafe(self._dial_forever(), self._loop)  # type: ignore[assignment]
            return
        self._thread = threading.Thread(target=self._run, name="agent-client", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._agent.bind(None)
        if self._task is not None:
            self._task.cancel()
            return
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._cancel_all)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._local is not None:
            self._local.close()

    def _cancel_all(self) -> None:
        for task in asyncio.all_tasks(self._loop):
            task.cancel()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        with contextlib.suppress(asyncio.CancelledError):
            self._loop.run_until_complete(self._dial_forever())

    async def _dial_forever(self) -> None:
        turn, hint, delay = 0, "", self._backoff[0]
        while not self._stopping:
            target = hint or self._servers[turn % len(self._servers)]
            hint = ""
            opened = time.monotonic()
            try:
                if self._local is not None and target == self._local.target:
                    hint = await self._serve_local(self._local, target)
                    if hint:
                        delay = self._backoff[0]
                        continue
                else:
                    await self._stream(target)
            except grpc.aio.AioRpcError as exc:
                trailing = dict(exc.trailing_metadata() or ())
                leader = trailing.get(LEADER_METADATA, "")
                if isinstance(leader, str) and leader and leader != target:
                    hint = leader
                    delay = self._backoff[0]
                    continue
                if LEADER_METADATA in trailing:  # a live server that knows no leader yet
                    delay = self._backoff[0]  # an election is under way: ask again soon, flat
                if exc.code() in (
                    grpc.StatusCode.UNAUTHENTICATED,
                    grpc.StatusCode.PERMISSION_DENIED,
                ):
                    log.error("refused by the server", server=target, why=exc.details())
                    delay = self._backoff[1]
                else:
                    log.debug("agent stream ended", server=target, code=str(exc.code()))
            finally:
                self._agent.bind(None)
                self.connected_to = ""
            if time.monotonic() - opened > 10:
                delay = self._backoff[0]  # it had been up: not a failing server
            turn += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._backoff[1])

    async def _serve_local(self, local: LocalAgentLink, target: str) -> str:
        """One turn at this process's own server, without gRPC: the leader to dial next
        when it does not lead ('' when unknown or once the link has ended)."""

        def welcomed() -> None:
            self.connected_to = target
            self.streams += 1
            log.info("agent connected", server=target, link="in-process")

        try:
            await local.serve(self._agent, self._pool, welcomed, f"in-process/{self.instance}")
        except NotAccepting as exc:
            return exc.leader if exc.leader != target else ""
        except PermissionError as exc:  # another live agent holds the node
            log.error("refused by the server", server=target, why=str(exc))
        except Exception as exc:  # refused by the control plane (e.g. a conflicting node)
            log.warning("agent refused", server=target, error=str(exc))
        return ""

    def _call(
        self,
        stack: contextlib.AsyncExitStack,
        target: str,
        requests: AsyncIterator[pb.AgentMessage],
    ) -> grpc.aio.StreamStreamCall | FramedCall:
        """The stream to `target` on this client's transport (the unix socket without TLS)."""
        local = target.startswith("unix:")
        if self._transport == "tcp":
            return FramedCall(target, requests, token=self._token, tls=None if local else self._tls)
        options = [("grpc.max_receive_message_length", 64 << 20), *KEEPALIVE_CLIENT_OPTIONS]
        if self._credentials is not None and not local:
            channel = grpc.aio.secure_channel(target, self._credentials, options=options)
        else:
            channel = grpc.aio.insecure_channel(target, options=options)
        stack.push_async_exit(channel)
        stub = pb_grpc.AgentServiceStub(channel)  # type: ignore[no-untyped-call]
        return stub.Connect(requests, metadata=self._metadata)

    async def _stream(self, target: str) -> None:
        async with contextlib.AsyncExitStack() as stack:
            outbox: asyncio.Queue[pb.AgentMessage | None] = asyncio.Queue()
            hello_sent = time.monotonic()  # the leader's welcome means it heard us after this
            lease_s = 0.0
            hello = self._agent.hello()
            first = pb.AgentMessage(
                hello=pb.Hello(
                    node=hello.node.name,
                    node_json=node_to_json(hello.node),
                    running=[
                        pb.Attempt(job_id=a.job_id, epoch=a.epoch, rank=a.rank, attempt=a.attempt)
                        for a in hello.running
                    ],
                    exited=[exit_to_pb(e.seq, e.report) for e in hello.exited],
                    version="1",
                    instance=self.instance,
                    batches=True,
                )
            )
            batches = False  # the server reads batches (its Welcome says so)

            async def requests() -> AsyncIterator[pb.AgentMessage]:
                yield first
                while (item := await outbox.get()) is not None:
                    if outbox.empty() or not batches:
                        yield item
                        continue
                    items, end = [item], False
                    while not outbox.empty():  # what was queued meanwhile goes with it
                        more = outbox.get_nowait()
                        if more is None:
                            end = True
                            break
                        items.append(more)
                    for msg in pack_agent(items):
                        yield msg
                    if end:
                        return

            call = self._call(stack, target, requests())
            beat: asyncio.Task[None] | None = None
            work: set[asyncio.Future[None]] = set()  # launches, log reads, resets in flight
            keep = _keeper(work)  # each is dropped from `work` once done
            silence = _Silence(call, WELCOME_TIMEOUT_S)
            watch = asyncio.create_task(silence.watch())
            try:
                async for received in call:
                    silence.hear()
                    for msg in server_messages(received):
                        kind = msg.WhichOneof("kind")
                        if kind == "welcome":
                            self.connected_to = target
                            self.streams += 1
                            self._agent.bind(self._emitter(outbox), hello)
                            interval = msg.welcome.heartbeat_interval_s or 2.0
                            lease_s = msg.welcome.lease_s
                            batches = msg.welcome.batches
                            silence.limit_s = max(SILENT_BEATS * interval, 2.0)
                            if lease_s > 0:
                                self._agent.renew_lease(hello_sent + lease_s)
                            beat = asyncio.create_task(self._beat(outbox, interval))
                            log.info("agent connected", server=target)
                        elif kind == "launch":
                            keep(self._launch(outbox, msg.launch))
                        elif kind == "stop":
                            s = msg.stop
                            self._agent.stop_attempt(s.job_id, s.epoch, s.grace_s)
                        elif kind == "read_log":
                            keep(self._read_log(outbox, msg.read_log))
                        elif kind == "exit_ack":
                            self._agent.ack(msg.exit_ack.seq)
                        elif kind == "heartbeat_ack":
                            sent = self._sent.pop(msg.heartbeat_ack.seq, None)
                            for old in [s for s in self._sent if s < msg.heartbeat_ack.seq]:
                                del self._sent[old]
                            if sent is not None and lease_s > 0:  # from the sending, not the ack
                                self._agent.renew_lease(sent + lease_s)
                        elif kind == "reset_gpu":
                            keep(self._reset(outbox, msg.reset_gpu))
                        elif kind == "inject":
                            keep(self._inject(outbox, msg.inject))
            except (asyncio.CancelledError, grpc.aio.AioRpcError):
                if not silence.abandoned:
                    raise
                log.warning("agent stream silent: dialling again", server=target)
            finally:
                watch.cancel()
                if beat is not None:
                    beat.cancel()
                outbox.put_nowait(None)

    def _emitter(self, outbox: asyncio.Queue[pb.AgentMessage | None]):  # type: ignore[no-untyped-def]
        loop = self._loop

        def emit(item: Outgoing) -> bool:
            if isinstance(item, ExitNotice):
                msg = pb.AgentMessage(exit=exit_to_pb(item.seq, item.report))
            else:
                finding = pb.HealthFinding(finding_json=finding_to_json(item))
                msg = pb.AgentMessage(health=finding)
            try:
                loop.call_soon_threadsafe(outbox.put_nowait, msg)
            except RuntimeError:
                return False
            return True

        return emit

    async def _beat(self, outbox: asyncio.Queue[pb.AgentMessage | None], interval: float) -> None:
        while True:
            seq = next(self._beats)
            self._sent[seq] = time.monotonic()
            beat = pb.Heartbeat(sent_at=time.time(), seq=seq)
            outbox.put_nowait(pb.AgentMessage(heartbeat=beat))
            await asyncio.sleep(interval)

    async def _launch(self, outbox: asyncio.Queue[pb.AgentMessage | None], msg: pb.Launch) -> None:
        loop = asyncio.get_running_loop()
        try:
            spec = spec_from_json(msg.spec_json)
            error = await loop.run_in_executor(self._pool, self._agent.launch, spec)
        except Exception as exc:  # a malformed spec must come back as a launch error
            error = f"agent could not launch: {exc}"
        result = pb.LaunchResult(request_id=msg.request_id, error=error)
        outbox.put_nowait(pb.AgentMessage(launched=result))

    async def _read_log(
        self, outbox: asyncio.Queue[pb.AgentMessage | None], msg: pb.ReadLog
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            data = await loop.run_in_executor(
                self._pool,
                self._agent.read_log,
                msg.job_id,
                msg.attempt,
                msg.rank,
                msg.offset,
                msg.max_bytes,
            )
            reply = pb.LogData(request_id=msg.request_id, data=data)
        except Exception as exc:
            reply = pb.LogData(request_id=msg.request_id, error=str(exc) or "read failed")
        outbox.put_nowait(pb.AgentMessage(log=reply))

    async def _reset(self, outbox: asyncio.Queue[pb.AgentMessage | None], msg: pb.ResetGpu) -> None:
        loop = asyncio.get_running_loop()
        try:
            error = await loop.run_in_executor(
                self._pool, self._agent.reset_gpu, msg.index, msg.uuid
            )
        except Exception as exc:  # the leader must hear an outcome, or its GPU stays RESETTING
            error = f"agent could not reset: {exc}"
        result = pb.ResetResult(request_id=msg.request_id, error=error)
        outbox.put_nowait(pb.AgentMessage(reset_result=result))

    async def _inject(self, outbox: asyncio.Queue[pb.AgentMessage | None], msg: pb.Inject) -> None:
        loop = asyncio.get_running_loop()
        try:
            lines = await loop.run_in_executor(self._pool, self._agent.inject, msg.script)
            reply = pb.InjectResult(request_id=msg.request_id, lines=lines)
        except Exception as exc:  # ValueError: a bad line, or injection disabled here
            reply = pb.InjectResult(request_id=msg.request_id, error=str(exc) or "inject failed")
        outbox.put_nowait(pb.AgentMessage(injected=reply))
