"""SoloReplication: a one-voter stand-in for `RaftReplication` that commits in-line.

Each submitted command is encoded, applied by a real `ClusterReplica` at the next log index and
returned as a completed future — what a single-server Raft log does, minus the disk and the
network. For tests of the replicated control plane's leader logic (which commands it proposes,
what it does when it takes or loses the lead); `commands` records every command applied, and
`leading` can be switched off to simulate losing the lead. With `defer` set, proposals wait
(unapplied, their futures pending) until `commit_deferred()` — a slow disk or quorum.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import Future

from gpu_platform.application.cluster_replica import ClusterReplica
from gpu_platform.application.raft_node import NotLeader
from gpu_platform.domain.cluster_state import ClusterState, Command
from gpu_platform.domain.faults.policy import FaultPolicy

__all__ = ["SoloReplication"]


class SoloReplication:
    """Duck-types `RaftReplication` for one server that always (or never) leads."""

    def __init__(self, policy: FaultPolicy = FaultPolicy(), server_id: int = 1) -> None:
        self.replica = ClusterReplica(policy, threading.RLock())
        self.server_id = server_id
        self.leading = True
        self.commands: list[Command] = []
        self.defer = False
        self._deferred: list[tuple[Command, Future[object]]] = []
        self._index = 0

    @property
    def lock(self) -> threading.RLock:
        return self.replica.lock

    @property
    def state(self) -> ClusterState:
        return self.replica.state

    def submit(self, command: Command, *, driven: bool = False) -> Future[object]:
        future: Future[object] = Future()
        if not self.leading:
            future.set_exception(self.not_leader())
            return future
        if self.defer:
            with self.lock:
                self._deferred.append((command, future))
            return future
        self._commit(command, future)
        return future

    def drive(self) -> None:
        """Nothing to drive: commits are in-line (or wait for `commit_deferred`)."""

    @property
    def deferred(self) -> int:
        """Proposals waiting for `commit_deferred`."""
        with self.lock:
            return len(self._deferred)

    def commit_deferred(self) -> None:
        """Apply every waiting proposal in order and complete its future."""
        with self.lock:
            waiting, self._deferred = self._deferred, []
        for command, future in waiting:
            self._commit(command, future)

    def _commit(self, command: Command, future: Future[object]) -> None:
        with self.lock:
            self._index += 1
            self.commands.append(command)
            entry = self.replica.encode(command, uuid.uuid4().hex)
            applied = self.replica.apply(self._index, entry)
        future.set_result(applied)

    def read_barrier(self) -> None:
        if not self.leading:
            raise self.not_leader()

    def is_leader(self) -> bool:
        return self.leading

    def leader_id(self) -> int | None:
        return self.server_id if self.leading else None

    def not_leader(self) -> NotLeader:
        return NotLeader(None, None)
