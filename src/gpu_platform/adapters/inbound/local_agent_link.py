"""`LocalAgentLink`: the in-process agent's link to its own server's `AgentHub`, without the
loopback gRPC stream.

The default server runs an agent in its own process. Over gRPC each launch, launch answer,
exit and acknowledgement crossed two event loops, protobuf and the loopback socket; here the
same calls are made directly, with the same contract as `AgentClient` + `AgentGrpcServer`
(tests/contract/test_agent_link_contract.py runs one suite against both):

- opening: the node is claimed as a stream's hello claims it (`claims`: the server's gRPC
  agent API, so a second agent cannot take a node a live one holds, over either link), then
  `AgentHub.open` with the agent's hello (its node, running tasks, kept exits) on a
  worker; NotAccepting (this server does not lead) sends the agent to the leader it names,
  over gRPC as any agent; then the agent's emitter is bound and its lease renewed, and only
  then are the hub's messages carried out (over gRPC they follow the welcome);
- launches, log reads, resets and fault scripts run on the client's worker pool and answer
  the hub from there; stops, heartbeats and findings run in order on one worker; exits are
  handed to `exited_all` in batches on one worker, those that arrive meanwhile together;
- a heartbeat every interval: the hub hears it, then the lease is renewed from its sending;
- `close(leader)` (the hub stepped down or a newer session took the node) ends the link;
  what the hub sends after that, and what the agent answers, is dropped, as on a closed
  stream (exits stay unacknowledged and go again in the next hello).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import structlog

from gpu_platform.application.agent import Agent, ExitNotice, Outgoing
from gpu_platform.application.agent_hub import AgentHub
from gpu_platform.application.consistency import LeaderElsewhere
from gpu_platform.application.raft_node import RaftNodeError
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchSpec

__all__ = ["AgentClaims", "LocalAgentLink"]

log = structlog.get_logger(__name__)


class AgentClaims(Protocol):
    """Which agent holds which node (`AgentGrpcServer`): `claim` gives why not, or None."""

    def claim(self, node: str, identity: str, session: Any) -> str | None: ...

    def release(self, session: Any) -> None: ...


class LocalAgentLink:
    """Stands for the agent stream to `target` (this server's own agent address) of the
    `AgentClient` given it: the client serves its turns at `target` through `serve`."""

    def __init__(
        self,
        hub: AgentHub,
        target: str,
        *,
        heartbeat_s: float,
        lease_s: float,
        claims: AgentClaims | None = None,
    ) -> None:
        self.hub = hub
        self._claims = claims
        self.target = target
        self.heartbeat_s = heartbeat_s or 2.0
        self.lease_s = lease_s
        self._ordered = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agent-local")
        self._exits = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agent-exits")

    def close(self) -> None:
        self._ordered.shutdown(wait=False, cancel_futures=True)
        self._exits.shutdown(wait=False, cancel_futures=True)

    async def serve(
        self,
        agent: Agent,
        pool: ThreadPoolExecutor,
        welcomed: Callable[[], None],
        identity: str,
    ) -> None:
        """One link's life, as one stream's: open (NotAccepting, a claim's refusal as
        PermissionError, or the control plane's refusal is raised), then heartbeats until
        the hub closes the link or the task is cancelled. `welcomed` is called once the hub
        has taken the agent (the client counts a stream); `identity` names the agent process
        for the node's claim."""
        loop = asyncio.get_running_loop()
        ended = asyncio.Event()

        def wake() -> None:  # from any thread
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(ended.set)

        session = _LocalSession(self, agent, pool, wake)
        hello = agent.hello()
        hello_sent = time.monotonic()
        exited = tuple((e.seq, e.report) for e in hello.exited)
        if self._claims is not None:
            why = self._claims.claim(session.node, identity, session)
            if why is not None:
                raise PermissionError(f"agent refused: {why}")
        try:
            await loop.run_in_executor(
                pool, self.hub.open, session, hello.node, hello.running, exited
            )
        except BaseException:
            session.end()
            self._release(session)
            raise
        try:
            agent.bind(session.emit, hello)
            if self.lease_s > 0:
                agent.renew_lease(hello_sent + self.lease_s)
            welcomed()
            session.welcome()
            while not session.closed:
                sent = session.last_seen = time.monotonic()
                beat = loop.run_in_executor(self._ordered, _call, self.hub.heartbeat, session)
                if await beat and self.lease_s > 0 and not session.closed:
                    agent.renew_lease(sent + self.lease_s)  # from the sending, as over gRPC
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ended.wait(), self.heartbeat_s)
        finally:
            session.end()
            self._release(session)
            self.hub.closed(session)

    def _release(self, session: _LocalSession) -> None:
        if self._claims is not None:
            self._claims.release(session)


class _LocalSession:
    """Implements AgentSession by calling the agent (see the module docstring). Sends never
    block: each is queued on a worker."""

    def __init__(
        self,
        link: LocalAgentLink,
        agent: Agent,
        pool: ThreadPoolExecutor,
        on_close: Callable[[], None],
    ) -> None:
        self._link = link
        self._hub = link.hub
        self._agent = agent
        self._pool = pool
        self._on_close = on_close
        self._lock = threading.Lock()
        self._held: list[tuple[ThreadPoolExecutor, Callable[[], None]]] | None = []
        self.closed = False
        self._pending: list[tuple[int, ExitReport]] = []
        self._draining = False
        self.last_seen = time.monotonic()  # the agent's last word (for the node's claim)

    @property
    def node(self) -> str:
        return self._agent.node.name

    # -- hub -> agent ----------------------------------------------------------------------

    def welcome(self) -> None:
        """The agent is bound: carry out what the hub sent meanwhile, then each as it comes."""
        with self._lock:
            held, self._held = self._held or [], None
        for executor, fn in held:
            self._run(executor, fn)

    def _send(self, executor: ThreadPoolExecutor, fn: Callable[[], None]) -> None:
        with self._lock:
            if self.closed:
                return
            if self._held is not None:
                self._held.append((executor, fn))
                return
        self._run(executor, fn)

    def _run(self, executor: ThreadPoolExecutor, fn: Callable[[], None]) -> None:
        with contextlib.suppress(RuntimeError):  # shut down: the server is stopping
            executor.submit(_call, fn)

    def send_launch(self, request_id: int, spec: LaunchSpec) -> None:
        def launch() -> None:
            try:
                error = self._agent.launch(spec)
            except Exception as exc:  # a launch must come back as an answer
                error = f"agent could not launch: {exc}"
            if not self.closed:
                self._hub.launched(self, request_id, error)

        self._send(self._pool, launch)

    def send_stop(self, job_id: str, epoch: int, grace_s: float) -> None:
        self._send(self._link._ordered, lambda: self._agent.stop_attempt(job_id, epoch, grace_s))

    def send_read_log(
        self, request_id: int, job_id: str, attempt: int, rank: int, offset: int, max_bytes: int
    ) -> None:
        def read() -> None:
            try:
                data, error = self._agent.read_log(job_id, attempt, rank, offset, max_bytes), ""
            except Exception as exc:
                data, error = b"", str(exc) or "read failed"
            if not self.closed:
                self._hub.log_data(self, request_id, data, error)

        self._send(self._pool, read)

    def send_exit_ack(self, seq: int) -> None:
        self._send(self._link._ordered, lambda: self._agent.ack(seq))

    def send_reset(self, request_id: int, index: int, uuid: str) -> None:
        def reset() -> None:
            try:
                error = self._agent.reset_gpu(index, uuid)
            except Exception as exc:  # the leader must hear an outcome
                error = f"agent could not reset: {exc}"
            if not self.closed:
                self._hub.reset_done(self, request_id, error)

        self._send(self._pool, reset)

    def send_inject(self, request_id: int, script: str) -> None:
        def inject() -> None:
            try:
                lines, error = tuple(self._agent.inject(script)), ""
            except Exception as exc:  # ValueError: a bad line, or injection disabled here
                lines, error = (), str(exc) or "inject failed"
            if not self.closed:
                self._hub.injected(self, request_id, lines, error)

        self._send(self._pool, inject)

    def close(self, leader: str) -> None:
        """End the link (the agent dials its servers again, as after a stream's end)."""
        self.end()
        self._on_close()

    def end(self) -> None:
        with self._lock:
            self.closed = True
            self._held = None
            self._pending.clear()

    # -- agent -> hub ----------------------------------------------------------------------

    def emit(self, item: Outgoing) -> bool:
        if self.closed:
            return False
        self.last_seen = time.monotonic()
        if not isinstance(item, ExitNotice):
            finding = item
            self._run(self._link._ordered, lambda: self._hub.finding(self, finding))
            return True
        with self._lock:
            if self.closed:
                return False
            self._pending.append((item.seq, item.report))
            if self._draining:
                return True
            self._draining = True
        self._run(self._link._exits, self._drain)
        return True

    def _drain(self) -> None:
        """Hand the exits over in batches: those that came while one was committed go next."""
        while True:
            with self._lock:
                items, self._pending = self._pending, []
                if not items or self.closed:
                    self._draining = False
                    return
            _call(self._hub.exited_all, self, items)


def _call(fn: Callable[..., object], *args: object) -> bool:
    """Run `fn`: False when it failed (a lost lead or a failure is logged, as the gRPC
    server's workers do) or returned False (a heartbeat that may not renew the lease)."""
    try:
        return fn(*args) is not False
    except (LeaderElsewhere, RaftNodeError) as exc:  # lost the lead: the agent moves on
        log.info("agent message not taken", error=str(exc))
    except Exception:
        log.exception("agent message failed")
    return False
