"""What the agent hub works with: the agent's stream as the transport offers it
(`AgentSession`), what the control plane hears from its agents (`AgentListener`), the tasks an
agent reports (`AttemptRef`) and the hub's errors.

Errors: `AgentUnavailable` (a `LaunchError`: the task's node has no live agent; no fault of
the job) and `NotAccepting` (this server takes no agents now; it names the leader's agent
address). Split from `agent_hub` for size; `agent_hub` re-exports every name.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from gpu_platform.domain.faults.health import HealthEvent
from gpu_platform.domain.model.node import Node
from gpu_platform.ports.outbound.job_runner import ExitReport, LaunchError, LaunchSpec

__all__ = [
    "AgentListener",
    "AgentSession",
    "AgentUnavailable",
    "AttemptRef",
    "NotAccepting",
]


@dataclass(frozen=True, slots=True)
class AttemptRef:
    """One live task an agent runs: rank `rank` of attempt `attempt` (epoch `epoch`)."""

    job_id: str
    epoch: int
    rank: int
    attempt: int = 0


class AgentUnavailable(LaunchError):
    """The task's node has no live agent here (not connected yet, silent, or it did not answer
    in time): nothing ran, and it is no fault of the job."""


class NotAccepting(Exception):
    """This server does not take agents now (it is not the leader); `leader` is the agent
    address to try instead, '' when unknown."""

    def __init__(self, leader: str) -> None:
        self.leader = leader
        super().__init__(f"not the leader; try {leader or 'another server'}")


class AgentSession(Protocol):
    """One agent's stream, as the transport adapter offers it. Sends never block."""

    @property
    def node(self) -> str: ...

    def send_launch(self, request_id: int, spec: LaunchSpec) -> None: ...

    def send_stop(self, job_id: str, epoch: int, grace_s: float) -> None: ...

    def send_read_log(
        self, request_id: int, job_id: str, attempt: int, rank: int, offset: int, max_bytes: int
    ) -> None: ...

    def send_exit_ack(self, seq: int) -> None: ...

    def send_reset(self, request_id: int, index: int, uuid: str) -> None: ...

    def send_inject(self, request_id: int, script: str) -> None: ...

    def close(self, leader: str) -> None:
        """End the stream, telling the agent where the leader is now ('' if unknown)."""
        ...


class AgentListener(Protocol):
    """What the control plane hears from its agents (called without the hub's lock)."""

    def agent_connected(
        self, node: Node, running: tuple[AttemptRef, ...], exited: tuple[ExitReport, ...]
    ) -> None:
        """Register the node, take the exits it kept while it had no leader, and reconcile
        what it runs; raise to refuse the agent."""
        ...

    def agent_heartbeat(self, node: str) -> None: ...

    def agent_finding(self, event: HealthEvent) -> None: ...

    def agent_exit(self, report: ExitReport) -> None:
        """A task ended that no `start` of this hub is waiting on (started before a failover)."""
        ...

    def accepting(self) -> str | None:
        """None when agents may connect here, else the leader's agent address ('' unknown)."""
        ...

    def wait_for(self, future: Future[object], timeout: float) -> None:
        """Wait until `future` is done or `timeout` passes (the control plane lets its lock
        go meanwhile, so a slow agent does not stall it)."""
        ...
