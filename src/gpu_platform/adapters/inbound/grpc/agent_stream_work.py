"""Per-stream parts of the agents' gRPC server: the session its sends are queued on
(`StreamSession`, sent as batches where the agent reads them: `outgoing`), calls chained in
arrival order on its worker pool (`chain`), and one stream's exits handed to the hub in
batches (`ExitBatches`). All but the session's sends are used on the server's event loop only."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog

from gpu_platform.adapters.agent_wire.batches import pack_server
from gpu_platform.adapters.agent_wire.codec import spec_to_json
from gpu_platform.adapters.agent_wire.v1 import agent_pb2 as pb
from gpu_platform.application.agent_hub import AgentHub, AgentSession
from gpu_platform.application.consistency import LeaderElsewhere
from gpu_platform.application.raft_node import RaftNodeError
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchSpec

__all__ = ["CLOSE", "ExitBatches", "StreamSession", "bind", "chain", "outgoing"]

log = structlog.get_logger("gpu_platform.adapters.inbound.grpc.agent_service")
#: Queued by `StreamSession.close`: the stream ends after what was queued before it.
CLOSE = object()


class StreamSession:
    """Implements AgentSession over one call: sends from any thread are queued, and the event
    loop is woken once for all that were queued before it ran (a cycle's launches, exit acks),
    which then go as one batch to an agent that reads batches."""

    def __init__(self, node: str, loop: asyncio.AbstractEventLoop, batches: bool) -> None:
        self._node = node
        self._loop = loop
        self._items: list[Any] = []
        self._lock = threading.Lock()
        self._woken = False  # a wake-up is scheduled on the loop and has not run yet
        self.ready = asyncio.Event()  # set by a wake-up; used on the loop only
        self.batches = batches
        self.leader = ""
        self.last_seen = time.monotonic()  # the agent's last message (on the event loop)

    @property
    def node(self) -> str:
        return self._node

    def _put(self, item: object) -> None:
        with self._lock:
            self._items.append(item)
            if self._woken:
                return
            self._woken = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server stopped
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        with self._lock:
            self._woken = False
        self.ready.set()

    def take(self) -> list[Any]:
        """Everything queued so far, in order (on the event loop)."""
        self.ready.clear()
        with self._lock:
            items, self._items = self._items, []
        return items

    def send_launch(self, request_id: int, spec: LaunchSpec) -> None:
        launch = pb.Launch(request_id=request_id, spec_json=spec_to_json(spec))
        self._put(pb.ServerMessage(launch=launch))

    def send_stop(self, job_id: str, epoch: int, grace_s: float) -> None:
        self._put(pb.ServerMessage(stop=pb.Stop(job_id=job_id, epoch=epoch, grace_s=grace_s)))

    def send_read_log(
        self, request_id: int, job_id: str, attempt: int, rank: int, offset: int, max_bytes: int
    ) -> None:
        read = pb.ReadLog(
            request_id=request_id,
            job_id=job_id,
            attempt=attempt,
            rank=rank,
            offset=offset,
            max_bytes=max_bytes,
        )
        self._put(pb.ServerMessage(read_log=read))

    def send_heartbeat_ack(self, seq: int) -> None:
        self._put(pb.ServerMessage(heartbeat_ack=pb.HeartbeatAck(seq=seq)))

    def send_exit_ack(self, seq: int) -> None:
        self._put(pb.ServerMessage(exit_ack=pb.ExitAck(seq=seq)))

    def send_reset(self, request_id: int, index: int, uuid: str) -> None:
        reset = pb.ResetGpu(request_id=request_id, index=index, uuid=uuid)
        self._put(pb.ServerMessage(reset_gpu=reset))

    def send_inject(self, request_id: int, script: str) -> None:
        self._put(pb.ServerMessage(inject=pb.Inject(request_id=request_id, script=script)))

    def close(self, leader: str) -> None:
        self.leader = leader
        self._put(CLOSE)


def outgoing(items: list[Any], batches: bool) -> Iterable[pb.ServerMessage]:
    """What goes on the wire for `items`: one batch (or a few) where the agent reads them."""
    return pack_server(items) if batches and len(items) > 1 else items


class ExitBatches:
    """One stream's exits, handed to the hub (`exited_all`) in batches on the worker pool:
    exits that arrive while a batch is being committed wait and go together in the next.
    One worker per stream at a time instead of one per exit; an agent that ends many tasks
    at once has them committed in one or two batches. Used on the event loop only."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        pool: ThreadPoolExecutor,
        hub: AgentHub,
        session: AgentSession,
    ) -> None:
        self._loop = loop
        self._pool = pool
        self._hub = hub
        self._session = session
        self._pending: list[tuple[int, ExitReport]] = []
        self._running: asyncio.Future[None] | None = None

    def add(self, seq: int, report: ExitReport) -> None:
        self._pending.append((seq, report))
        self._kick()

    def _kick(self) -> None:
        if self._running is not None or not self._pending:
            return
        items, self._pending = self._pending, []
        call = bind(self._hub.exited_all, self._session, items)
        self._running = chain(self._loop, self._pool, None, call)
        self._running.add_done_callback(self._done)

    def _done(self, _: asyncio.Future[None]) -> None:
        self._running = None
        self._kick()

    async def drained(self) -> None:
        """Return once every exit added so far has been handed over (the stream ended)."""
        while self._running is not None or self._pending:
            if self._running is not None and not self._running.done():
                await asyncio.wait({self._running})
            else:
                await asyncio.sleep(0)  # its done callback has yet to run


def bind(fn: Callable[..., None], *args: object) -> Callable[[], None]:
    return lambda: fn(*args)


def chain(
    loop: asyncio.AbstractEventLoop,
    pool: ThreadPoolExecutor,
    previous: asyncio.Future[None] | None,
    call: Callable[[], None],
) -> asyncio.Future[None]:
    """Run `call` on the pool after `previous` has finished (per-stream order)."""

    async def run() -> None:
        if previous is not None:
            with contextlib.suppress(Exception):
                await previous
        try:
            await loop.run_in_executor(pool, call)
        except (LeaderElsewhere, RaftNodeError) as exc:  # lost the lead: the agent moves on
            log.info("agent message not taken", error=str(exc))
        except Exception:
            log.exception("agent message failed")

    return asyncio.ensure_future(run())
