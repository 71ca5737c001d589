"""What the control plane's concerns share: `Shared` and `Run`.

`ControlPlane` builds one `Shared` and hands it to each collaborator (`leadership`, `health`,
`agents`, `admin`, `membership`, `lifecycle`, `jobs`, `scheduling`, `launching`, `commands`).
Its fields carry the names the control plane gives them (`shared.lock` is
`ControlPlane._lock`), so a method moved out of it reads the same with `self._s.x` for
`self._x`.

Thread-safety: read `state` and change the bookkeeping (`runs`, `agents_seen`, `nominated`,
`leading`, `leader_since`) under `lock`; `execute` takes the lock itself (replicated, it
lets it go while the commit is awaited). `beats` and `beats_committed` are written without it
(one dict write; a stale read only delays or repeats a heartbeat commit).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from gpu_platform.application.agent_hub import AgentHub
from gpu_platform.application.replication import RaftReplication as Replication
from gpu_platform.domain.cluster_state import ClusterState, Command
from gpu_platform.domain.events import DomainEvent
from gpu_platform.ports.outbound.clock import Clock
from gpu_platform.ports.outbound.job_runner import ExitReport, JobRunner

__all__ = ["LOG_NAME", "Run", "Shared"]

LOG_NAME = "gpu_platform.application.control_plane"  # one logger for all its concerns


@dataclass
class Run:
    """The tasks of one attempt still running, and why the attempt is ending (the first task
    that failed, or a launch error). The job's exit is recorded once every task has ended: a
    gang fails whole, and its GPUs stay held until its last process is gone."""

    tasks: int
    live: set[int] = field(default_factory=set)
    failure: ExitReport | None = None
    launch_error: str = ""


@dataclass(eq=False)
class Shared:
    """The pieces every concern of the control plane works with (one instance per plane).

    `execute` is the one command path (apply, persist, publish, carry out effects; replicated:
    through Raft first); `stop_attempt` and `on_exit` are the plane's own handling of stops and
    exits. `grace` is the stop grace period in seconds (`kill` sets it to 0 for one cancel).
    """

    lock: threading.RLock
    applied: threading.Condition  # notified (under `lock`) when a proposed command is applied
    wake: threading.Event  # wakes the scheduling loop
    stopping: threading.Event  # set once shutdown begins
    clock: Clock
    runner: JobRunner
    hub: AgentHub | None  # replicated: the leader's agents (also `runner`)
    replication: Replication | None  # None: the embedded control plane
    read_state: Callable[[], ClusterState]
    execute: Callable[[Command], list[DomainEvent]]
    stop_attempt: Callable[[str, int, tuple[str, ...]], None]
    on_exit: Callable[[ExitReport], None]
    runs: dict[tuple[str, int], Run]  # (job, epoch) -> its running tasks
    nominated: set[str]  # preemptors waiting for their victims to stop
    addresses: tuple[str, str, str]  # this server's (http url, grpc address, agent address)
    local_node: str | None  # replicated: the node of this process's own agent
    beats: dict[str, float]  # leading: node -> when we last heard its agent
    grace: float
    leading: bool = False
    leader_since: float = 0.0
    beats_committed: dict[str, float] = field(default_factory=dict)  # node -> last proposed
    agents_seen: set[str] = field(default_factory=set)  # nodes whose agent said hello to us

    @property
    def state(self) -> ClusterState:
        """The cluster state: the plane's own, or the replica's (read it under the lock)."""
        return self.read_state()

    def now(self) -> float:
        return self.clock.now()
