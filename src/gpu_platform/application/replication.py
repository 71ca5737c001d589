"""`RaftReplication`: the cluster state replicated by Raft, as the control plane uses it.

Commands are proposed in an envelope with a fresh id (`ClusterReplica` applies an id once, so a
proposal whose outcome was unknown may be retried safely: 64 random bits per replication, then
a counter); the proposer's future gets the
replica's `Applied` (events, or the domain error that refused the command). Linearizable reads
wait on Raft's ReadIndex: once it resolves, the state under `lock` reflects every command
acknowledged before the read began.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from concurrent.futures import Future

from gpu_platform.application.cluster_replica import ClusterReplica
from gpu_platform.application.raft_node import NotLeader, RaftNode
from gpu_platform.domain.cluster_state import ClusterState, Command
from gpu_platform.domain.consensus import Role

__all__ = ["RaftReplication"]


class RaftReplication:
    """Joins a `RaftNode` and the `ClusterReplica` it drives."""

    def __init__(self, node: RaftNode, replica: ClusterReplica, *, read_timeout_s: float = 10.0):
        self.node = node
        self.replica = replica
        self._read_timeout = read_timeout_s
        self._id_prefix = uuid.uuid4().hex[:16] + "-"  # command ids: unique without a syscall
        self._id_seq = itertools.count(1)

    @property
    def lock(self) -> threading.RLock:
        return self.replica.lock

    @property
    def state(self) -> ClusterState:
        return self.replica.state

    @property
    def server_id(self) -> int:
        return self.node.config.id

    def submit(self, command: Command, *, driven: bool = False) -> Future[object]:
        """Propose `command`; `driven`: the caller calls `drive()` next (see `RaftNode`)."""
        command_id = f"{self._id_prefix}{next(self._id_seq):x}"
        return self.node.propose(self.replica.encode(command, command_id), driven=driven)

    def drive(self) -> None:
        """Commit and apply what this thread proposed on this thread where it can
        (`RaftNode.drive`); call it holding no lock, before waiting on the futures."""
        self.node.drive()

    def read_barrier(self) -> None:
        """Block until a linearizable read may be served here; NotLeader elsewhere."""
        if not self.is_leader():
            raise self.not_leader()
        self.node.read_index().result(timeout=self._read_timeout)

    def is_leader(self) -> bool:
        return self.node.status().role is Role.LEADER

    def leader_id(self) -> int | None:
        return self.node.status().leader_id

    def not_leader(self) -> NotLeader:
        leader, address = self.node.leader()
        return NotLeader(leader, address)
