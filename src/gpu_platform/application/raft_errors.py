"""The Raft driver's errors (`raft_node` re-exports them).

Errors::

    RaftNodeError
    ├── NotLeader                   this node cannot take the request; leader_id/leader_address
    │                               say where
    ├── NodeStopped                 the node is stopped (or stopped before answering)
    ├── MembershipChangeInProgress  another membership change is not applied yet; retry later
    └── InvalidMembershipChange     the change is not valid in the current configuration
"""

from __future__ import annotations

from gpu_platform.application.raft_membership import PENDING

__all__ = [
    "InvalidMembershipChange",
    "MembershipChangeInProgress",
    "NodeStopped",
    "NotLeader",
    "RaftNodeError",
]


class RaftNodeError(Exception):
    """Base of the driver's errors."""


class NotLeader(RaftNodeError):
    """This node is not (or stopped being) the leader; retry at `leader_address` if known."""

    def __init__(self, leader_id: int | None, leader_address: str | None) -> None:
        self.leader_id = leader_id
        self.leader_address = leader_address
        where = f"node {leader_id} at {leader_address}" if leader_id else "unknown"
        super().__init__(f"not the leader; the leader is {where}")


class NodeStopped(RaftNodeError):
    """The node is stopped."""

    def __init__(self) -> None:
        super().__init__("raft node is stopped")


class MembershipChangeInProgress(RaftNodeError):
    """The leader has a membership change that is not applied yet (one at a time)."""

    def __init__(self) -> None:
        super().__init__(PENDING)


class InvalidMembershipChange(RaftNodeError):
    """The change cannot be made in the current configuration (`reason` says why)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"invalid membership change: {reason}")
