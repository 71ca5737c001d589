"""The Raft driver's settings and published status (`raft_node` re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass

from gpu_platform.domain.consensus import Role

__all__ = ["RaftNodeConfig", "RaftNodeStatus"]


@dataclass(frozen=True, slots=True)
class RaftNodeConfig:
    """Driver settings. Time: `tick_interval` seconds per tick; the rest counts ticks/entries."""

    id: int
    voters: tuple[int, ...]
    # Defaults = the server's (`raft_tick_seconds`, `raft_election_ticks`): 50 ms heartbeat,
    # election timeout random in [500, 1000) ms (a leader whose process ends is found sooner:
    # its link closes); see docs/raft.md for the timing budget.
    tick_interval: float = 0.05
    election_tick: int = 10
    heartbeat_tick: int = 1
    # Fewer Raft messages per commit (`consensus.Config.lean_replication`, issue 21): no
    # empty append per commit, and no heartbeat to a follower that got an append since the
    # last round and knows the commit index; followers learn a commit within one tick.
    lean_replication: bool = True
    pre_vote: bool = True
    check_quorum: bool = True
    snapshot_entries: int = 10_000  # applied entries between snapshots; 0 = never
    compact_keep: int = 1_000  # entries kept before the snapshot index for slow followers
    max_size_per_msg: int = 1 << 20  # bytes per append message
    max_inflight_msgs: int = 256
    max_inbox_batch: int = 4096  # inbox items handled before the next Ready
    # A leader's loop stalled (slow fsync) has its heartbeats repeated for up to this many
    # ticks (`raft_heartbeat`); 0 = never.
    heartbeat_cover_ticks: int = 12
    # A node stalled since it last heard its leader defers the tick that would start an
    # election (or check the quorum) by one interval, once (`raft_stalls`); False = never.
    stall_defer: bool = True
    seed: int | None = None
    # A server joining a running cluster: bootstrap nothing (`voters` is ignored) and wait to
    # be added (`add_voter` on the leader) and brought up to date by it.
    join: bool = False


@dataclass(frozen=True, slots=True)
class RaftNodeStatus:
    """What the node last published (after each loop iteration)."""

    id: int
    role: Role
    leader_id: int | None
    leader_address: str | None
    term: int
    commit: int
    applied: int
    last_index: int
    snapshot_index: int
    voters: tuple[int, ...]  # the applied configuration (incoming voters when joint)
    running: bool
    learners: tuple[int, ...] = ()
