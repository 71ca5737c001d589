"""An agent's stream without gRPC: a hub and an `Agent` in one process, for unit tests.

`LoopbackSession` implements `AgentSession` by calling the agent directly; the blocking calls
(launch, log reads, resets, scripts) run on their own threads and answer the hub as the real
transport does. `silent=True` drops resets and scripts (an agent that never answers).
`AcceptingListener` is a control plane that accepts every agent and does nothing else.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import Future

from gpu_platform.application.agent import Agent, ExitNotice, Outgoing
from gpu_platform.application.agent_hub import AgentHub, AttemptRef
from gpu_platform.domain.faults.health import HealthEvent
from gpu_platform.domain.model.node import Node
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchSpec

__all__ = ["AcceptingListener", "LoopbackSession", "connect"]


class AcceptingListener:
    """Implements AgentListener: accepts every agent; records nodes, findings and exits."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.findings: list[HealthEvent] = []
        self.exits: list[ExitReport] = []

    def agent_connected(
        self, node: Node, running: tuple[AttemptRef, ...], exited: tuple[ExitReport, ...]
    ) -> None:
        self.nodes.append(node)
        self.exits.extend(exited)

    def agent_heartbeat(self, node: str) -> None:
        pass

    def agent_finding(self, event: HealthEvent) -> None:
        self.findings.append(event)

    def agent_exit(self, report: ExitReport) -> None:
        self.exits.append(report)

    def accepting(self) -> str | None:
        return None

    def wait_for(self, future: Future[object], timeout: float) -> None:
        with contextlib.suppress(Exception):
            future.result(timeout=timeout)


class LoopbackSession:
    """Implements AgentSession over a direct reference to `agent` (see the module docstring)."""

    def __init__(self, hub: AgentHub, agent: Agent, *, silent: bool = False) -> None:
        self._hub = hub
        self._agent = agent
        self.silent = silent
        self.resets: list[tuple[int, str]] = []  # (index, uuid) as sent
        self.closed_with: str | None = None

    @property
    def node(self) -> str:
        return self._agent.node.name

    def _later(self, fn: Callable[[], None]) -> None:
        threading.Thread(target=fn, name="loopback-agent", daemon=True).start()

    def send_launch(self, request_id: int, spec: LaunchSpec) -> None:
        self._later(lambda: self._hub.launched(self, request_id, self._agent.launch(spec)))

    def send_stop(self, job_id: str, epoch: int, grace_s: float) -> None:
        self._agent.stop_attempt(job_id, epoch, grace_s)

    def send_read_log(
        self, request_id: int, job_id: str, attempt: int, rank: int, offset: int, max_bytes: int
    ) -> None:
        data = self._agent.read_log(job_id, attempt, rank, offset, max_bytes)
        self._later(lambda: self._hub.log_data(self, request_id, data, ""))

    def send_exit_ack(self, seq: int) -> None:
        self._agent.ack(seq)

    def send_reset(self, request_id: int, index: int, uuid: str) -> None:
        self.resets.append((index, uuid))
        if not self.silent:
            self._later(
                lambda: self._hub.reset_done(self, request_id, self._agent.reset_gpu(index, uuid))
            )

    def send_inject(self, request_id: int, script: str) -> None:
        if self.silent:
            return

        def run() -> None:
            try:
                lines = tuple(self._agent.inject(script))
            except ValueError as exc:
                self._hub.injected(self, request_id, (), str(exc))
                return
            self._hub.injected(self, request_id, lines, "")

        self._later(run)

    def close(self, leader: str) -> None:
        self.closed_with = leader


def connect(hub: AgentHub, agent: Agent, *, silent: bool = False) -> LoopbackSession:
    """Open `agent`'s stream on `hub` (its hello: node, running tasks, kept exits)."""
    session = LoopbackSession(hub, agent, silent=silent)
    hello = agent.hello()
    hub.open(session, hello.node, hello.running, tuple((e.seq, e.report) for e in hello.exited))

    def emit(item: Outgoing) -> bool:
        if isinstance(item, ExitNotice):
            hub.exited(session, item.seq, item.report)
        else:
            hub.finding(session, item)
        return True

    agent.bind(emit, hello)
    return session
