"""Per-stream work of the agents' gRPC server on its worker pool: calls chained in arrival
order (`chain`), and one stream's exits handed to the hub in batches (`ExitBatches`).
Used on the server's event loop only."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import structlog

from gpu_platform.application.agent_hub import AgentHub, AgentSession
from gpu_platform.application.consistency import LeaderElsewhere
from gpu_platform.application.raft_node import RaftNodeError
from gpu_platform.ports.outbound.job_runner import ExitReport

__all__ = ["ExitBatches", "bind", "chain"]

log = structlog.get_logger("gpu_platform.adapters.inbound.grpc.agent_service")


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
