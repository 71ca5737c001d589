"""`AgentHub`: the leader's side of its agents — a `JobRunner` whose processes run on nodes.

Theory of operation. Each agent keeps one stream open to the leader (the transport adapter
turns it into an `AgentSession` and calls `open`, `heartbeat`, `finding`, `exited`,
`launched`, `log_data`, `closed`). The control plane drives the hub as it would the local
process runner: `start` sends a launch to the task's node and waits for the agent's answer
(running, or a launch error); `stop` sends a stop to every node where the attempt has a live
task; exits come back as `exited` and go to the attempt's `on_exit` (or the listener's when
this leader did not start it: it was started before a failover).

A task whose node has no live session cannot report: `stop` reports such tasks ended at once
("lost with its node"), from a worker thread as a runner would — the cluster has declared the
node gone, and re-running the job elsewhere must not wait for a machine that may never come
back (when it does, reconcile kills what it still runs). A session is live while its agent
has spoken within `stale_after_s` (a stopped agent keeps its TCP stream open but goes silent).

The hub is also the leader's `GpuReset` for agent nodes: `reset(node, index)` sends a reset to
the node's live session and waits (at most `reset_timeout_s`) for the agent's outcome; a node
without a live session, a stream that ends, or no answer in time is a `GpuResetError` (the GPU
then goes OFFLINE, like any failed reset). `inject(node, script)` carries a fault script to a
node's agent the same way (a ValueError when it cannot: the caller names the script).

Leaving the leader role must not stop jobs: `stop_all` and `reap` do nothing; the next leader
learns what runs from each agent's hello.

The session and listener protocols, `AttemptRef` and the hub's errors live in
`agent_contracts` (re-exported here); log reads, resets and scripts in `agent_requests`.

Thread-safety: every public method may be called from any thread.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

import structlog

from gpu_platform.application.agent_contracts import (
    AgentListener,
    AgentSession,
    AgentUnavailable,
    AttemptRef,
    NotAccepting,
)
from gpu_platform.application.agent_requests import AgentRequests
from gpu_platform.domain.faults.health import HealthEvent
from gpu_platform.domain.model.node import Node
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchError, LaunchSpec
from gpu_platform.ports.outbound.node_lease import LEASE_ENDED

__all__ = [
    "AgentHub",
    "AgentListener",
    "AgentSession",
    "AgentUnavailable",
    "AttemptRef",
    "NotAccepting",
]

log = structlog.get_logger(__name__)


_Handlers = tuple[
    Callable[[ExitReport], None], Callable[[Sequence[ExitReport]], None] | None
]  # an attempt's exit handlers: one report, many at once (or None)


@dataclass
class _Live:
    session: AgentSession
    last_seen: float
    tasks: set[tuple[str, int, int]] = field(default_factory=set)  # (job, epoch, rank)
    ready: bool = False  # reconciled: launches may go to it
    uuids: dict[int, str] = field(default_factory=dict)  # GPU index -> uuid, from the hello


class AgentHub(AgentRequests):
    """Implements the JobRunner port over the agents' streams (see the module docstring)."""

    def __init__(
        self,
        *,
        launch_timeout_s: float = 15.0,
        log_timeout_s: float = 10.0,
        stale_after_s: float = 15.0,
        reset_timeout_s: float = 150.0,
    ) -> None:
        self._listener: AgentListener | None = None
        self._lock = threading.Lock()
        self._sessions: dict[str, _Live] = {}
        self._where: dict[tuple[str, int], dict[int, str]] = {}  # (job, epoch) -> rank -> node
        self._logs_at: dict[tuple[str, int, int], str] = {}  # (job, attempt, rank) -> node
        self._on_exit: dict[tuple[str, int], _Handlers] = {}  # (job, epoch) -> its handlers
        self._requests: dict[int, Future[object]] = {}
        self._asked: dict[int, AgentSession] = {}  # reset/inject request -> its session
        self._ids = itertools.count(1)
        self._launch_timeout = launch_timeout_s
        self._log_timeout = log_timeout_s
        self._stale_after = stale_after_s
        self._reset_timeout = reset_timeout_s
        self._renewing: Callable[[], bool] = lambda: True

    def attach(self, listener: AgentListener) -> None:
        self._listener = listener

    def renew_leases_while(self, renewing: Callable[[], bool]) -> None:
        """Welcome agents and acknowledge their heartbeats (each renews the agent's lease)
        only while `renewing()` holds: replicated, while a quorum was in this leader's term
        within one election timeout (`RaftNode.heard_quorum_within`, docs/replication.md)."""
        self._renewing = renewing

    # -- from the transport ----------------------------------------------------------------

    def open(
        self,
        session: AgentSession,
        node: Node,
        running: tuple[AttemptRef, ...],
        exited: tuple[tuple[int, ExitReport], ...] = (),
    ) -> None:
        """A new stream: refuse it (NotAccepting) unless this server leads, then record what
        it runs, let the control plane reconcile, and deliver the exits the agent kept while
        it had no leader ((seq, report) pairs). A session for the same node replaces the old
        one (the agent reconnected)."""
        listener = self._listener
        if listener is None:  # the control plane is still starting
            raise NotAccepting("")
        leader = listener.accepting()
        if leader is not None:
            raise NotAccepting(leader)
        if not self._renewing():  # its welcome would renew the lease: ask again soon
            raise NotAccepting("")
        with self._lock:
            old = self._sessions.get(session.node)
            live = _Live(session, time.monotonic(), uuids={g.index: g.uuid for g in node.gpus})
            for ref in running:
                key = (ref.job_id, ref.epoch, ref.rank)
                live.tasks.add(key)
                self._where.setdefault(key[:2], {})[ref.rank] = session.node
                if ref.attempt:
                    self._logs_at[(ref.job_id, ref.attempt, ref.rank)] = session.node
            self._sessions[session.node] = live
        if old is not None and old.session is not session:
            old.session.close("")
        log.info("agent connected", node=node.name, running=len(running))
        listener.agent_connected(node, running, tuple(report for _, report in exited))
        with self._lock:
            live.ready = True
        for seq, _ in exited:
            session.send_exit_ack(seq)

    def heartbeat(self, session: AgentSession) -> bool:
        """Note the node's heartbeat; whether it may be acknowledged (renewing the lease)."""
        renew = self._renewing()  # asked first: the renewal counts from the beat's sending
        if self._touch(session):
            self._need_listener().agent_heartbeat(session.node)
        return renew

    def finding(self, session: AgentSession, event: HealthEvent) -> None:
        if self._touch(session):
            self._need_listener().agent_finding(event)

    def exited(self, session: AgentSession, seq: int, report: ExitReport) -> None:
        """A task ended (possibly reported twice across a reconnect: the control plane
        ignores a report for an attempt that is no longer current)."""
        self.exited_all(session, [(seq, report)])

    def exited_all(self, session: AgentSession, items: Sequence[tuple[int, ExitReport]]) -> None:
        """`exited` for each (seq, report) one stream reported at once: the attempts started
        by `start_all` with `on_exits` get their reports in one call (their finishes commit
        together); each is acknowledged once every handler has returned."""
        self._touch(session)
        groups: dict[_Handlers | None, list[ExitReport]] = {}
        with self._lock:
            for _, report in items:
                key = (report.job_id, report.epoch, report.rank)
                node = self._forget(key)
                handlers = self._on_exit.get(key[:2])
                if key[:2] not in self._where:
                    self._on_exit.pop(key[:2], None)
                for name in {node, session.node}:
                    live = self._sessions.get(name) if name is not None else None
                    if live is not None:
                        live.tasks.discard(key)
                groups.setdefault(handlers, []).append(report)
        try:
            for handlers, reports in groups.items():
                if handlers is None:
                    for report in reports:
                        self._need_listener().agent_exit(report)
                elif handlers[1] is not None:
                    handlers[1](reports)
                else:
                    for report in reports:
                        handlers[0](report)
        except Exception:
            # Not taken (this server lost the lead mid-commit, or failed): end the stream, so
            # the agent's next hello carries these exits again. On a stream kept open they
            # would wait unacknowledged until some later reconnect, their jobs left RUNNING.
            listener = self._listener
            session.close((listener.accepting() if listener is not None else None) or "")
            raise
        for seq, _ in items:
            if seq:
                session.send_exit_ack(seq)

    def launched(self, session: AgentSession, request_id: int, error: str) -> None:
        self._touch(session)
        self._resolve(request_id, error)

    def reset_done(self, session: AgentSession, request_id: int, error: str) -> None:
        self._touch(session)
        self._resolve(request_id, error)

    def injected(
        self, session: AgentSession, request_id: int, lines: tuple[str, ...], error: str
    ) -> None:
        self._touch(session)
        self._resolve(request_id, ValueError(error) if error else lines)

    def log_data(self, session: AgentSession, request_id: int, data: bytes, error: str) -> None:
        self._touch(session)
        self._resolve(request_id, LaunchError(error) if error else data)

    def closed(self, session: AgentSession) -> None:
        with self._lock:
            live = self._sessions.get(session.node)
            if live is not None and live.session is session:
                del self._sessions[session.node]
            orphans = [self._requests.get(r) for r, s in self._asked.items() if s is session]
        for fut in orphans:  # a reset or script the agent can no longer answer
            if fut is not None and not fut.done():
                with contextlib.suppress(InvalidStateError):  # answered meanwhile
                    fut.set_exception(AgentUnavailable(f"the agent on {session.node} left"))
        log.info("agent disconnected", node=session.node)

    def step_down(self, leader: str) -> None:
        """This server stopped leading: end every stream, pointing agents at `leader`."""
        with self._lock:
            sessions = [live.session for live in self._sessions.values()]
            self._sessions.clear()
            self._where.clear()
            self._on_exit.clear()
            pending = list(self._requests.values())
            self._requests.clear()
            self._asked.clear()
        for fut in pending:
            if not fut.done():
                fut.set_exception(AgentUnavailable("the server stopped leading"))
        for session in sessions:
            session.close(leader)

    def ready_nodes(self) -> set[str]:
        """Nodes whose agent is reconciled and has spoken within `stale_after_s`."""
        with self._lock:
            return {n for n, live in self._sessions.items() if live.ready and self._fresh(n)}

    def connected(self) -> dict[str, float]:
        """Node -> seconds since its agent last spoke."""
        now = time.monotonic()
        with self._lock:
            return {n: now - live.last_seen for n, live in self._sessions.items()}

    # -- JobRunner ---------------------------------------------------------------------------

    def start(self, spec: LaunchSpec, on_exit: Callable[[ExitReport], None]) -> None:
        (error,) = self.start_all([spec], on_exit)
        if error is not None:
            raise error

    def start_all(
        self,
        specs: Sequence[LaunchSpec],
        on_exit: Callable[[ExitReport], None],
        on_exits: Callable[[Sequence[ExitReport]], None] | None = None,
    ) -> list[LaunchError | None]:
        """`start` every spec, their launches sent at once and the answers awaited together
        (a cycle's launches cost one round trip to each agent, not one per task). Per spec,
        None (it runs) or the error `start` would have raised (AgentUnavailable when the node
        has no live agent or it did not answer in time). `on_exits`, if given, takes the
        exits one stream reports at once instead of `on_exit` one by one."""
        handlers: _Handlers = (on_exit, on_exits)
        sent: list[tuple[LaunchSpec, int, Future[object]] | LaunchError] = []
        for spec in specs:
            request_id = next(self._ids)
            fut: Future[object] = Future()
            with self._lock:
                live = self._fresh(spec.node)
                if live is None or not live.ready:
                    sent.append(AgentUnavailable(f"node {spec.node!r} has no connected agent"))
                    continue
                self._requests[request_id] = fut
                self._on_exit[(spec.job_id, spec.epoch)] = handlers
                self._where.setdefault((spec.job_id, spec.epoch), {})[spec.rank] = spec.node
                self._logs_at[(spec.job_id, spec.attempt, spec.rank)] = spec.node
                live.tasks.add((spec.job_id, spec.epoch, spec.rank))
                session = live.session
            session.send_launch(request_id, spec)
            sent.append((spec, request_id, fut))
        deadline = time.monotonic() + self._launch_timeout
        return [x if isinstance(x, LaunchError) else self._answer(*x, deadline) for x in sent]

    def _answer(
        self, spec: LaunchSpec, request_id: int, fut: Future[object], deadline: float
    ) -> LaunchError | None:
        """Wait (until `deadline`, monotonic) for one launch's answer: None when it runs,
        else its error (the task is no longer tracked)."""
        unavailable = False
        try:
            self._need_listener().wait_for(fut, max(0.0, deadline - time.monotonic()))
            error = fut.result(timeout=0)
        except FutureTimeout:
            unavailable = True
            error = f"agent on {spec.node} did not answer the launch in {self._launch_timeout:g}s"
        except LaunchError as exc:
            unavailable = isinstance(exc, AgentUnavailable)
            error = str(exc)
        finally:
            with self._lock:
                self._requests.pop(request_id, None)
        if isinstance(error, str) and error.startswith(LEASE_ENDED):
            unavailable = True  # a stale launch the agent refused: no fault of the job
        if not error:
            return None
        key = (spec.job_id, spec.epoch, spec.rank)
        with self._lock:
            self._forget(key)
            live = self._sessions.get(spec.node)
            if live is not None:
                live.tasks.discard(key)
        return (AgentUnavailable if unavailable else LaunchError)(str(error))

    def stop(self, job_id: str, epoch: int, grace_s: float) -> bool:
        lost: list[int] = []
        sends: list[tuple[AgentSession, int]] = []
        silent: list[AgentSession] = []
        with self._lock:
            ranks = list(self._where.get((job_id, epoch), {}).items())
            for rank, node in ranks:
                live = self._fresh(node)
                if live is None:
                    lost.append(rank)
                    self._forget((job_id, epoch, rank))
                    stale = self._sessions.pop(node, None)
                    if stale is not None:  # a stopped agent: when it wakes, it must say
                        silent.append(stale.session)  # hello again and be reconciled
                elif all(s is not live.session for s, _ in sends):
                    sends.append((live.session, rank))
            handlers = self._on_exit.get((job_id, epoch))
            if (job_id, epoch) not in self._where:
                self._on_exit.pop((job_id, epoch), None)
        for session, _ in sends:
            session.send_stop(job_id, epoch, grace_s)
        for session in silent:
            session.close("")
        if lost:
            report = handlers[0] if handlers else self._need_listener().agent_exit
            reports = [
                ExitReport(job_id, epoch, None, rank=r, detail="lost with its node") for r in lost
            ]
            threading.Thread(
                target=lambda: [report(r) for r in reports], name="lost-tasks", daemon=True
            ).start()
        return bool(ranks)

    def stop_on(self, node: str, job_id: str, epoch: int) -> None:
        """Tell `node`'s agent to stop an attempt this hub does not track (one the agent said
        it does not run): its agent then kills leftovers of an earlier incarnation."""
        with self._lock:
            live = self._sessions.get(node)
        if live is not None:
            live.session.send_stop(job_id, epoch, 0.0)

    def stop_all(self, grace_s: float) -> None:
        """Jobs outlive the leader: nothing to stop here."""

    def reap(self, job_id: str, epoch: int) -> int:
        return 0

    # -- plumbing ----------------------------------------------------------------------------

    def _resolve(self, request_id: int, result: object) -> None:
        with self._lock:
            fut = self._requests.get(request_id)
        if fut is None or fut.done():
            return
        if isinstance(result, BaseException):
            fut.set_exception(result)
        else:
            fut.set_result(result)

    def _touch(self, session: AgentSession) -> bool:
        with self._lock:
            live = self._sessions.get(session.node)
            if live is None or live.session is not session:
                return False
            live.last_seen = time.monotonic()
            return True

    def _forget(self, key: tuple[str, int, int]) -> str | None:
        """Drop a task from `_where` (an attempt with no task left goes); its node, if known.
        Call under the lock."""
        ranks = self._where.get(key[:2])
        if ranks is None:
            return None
        node = ranks.pop(key[2], None)
        if not ranks:
            del self._where[key[:2]]
        return node

    def _fresh(self, node: str) -> _Live | None:
        live = self._sessions.get(node)
        if live is None or time.monotonic() - live.last_seen > self._stale_after:
            return None
        return live

    def _need_listener(self) -> AgentListener:
        if self._listener is None:
            raise RuntimeError("AgentHub used before attach()")
        return self._listener
