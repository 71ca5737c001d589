"""Settings of replication (docs/replication.md): this server's Raft id, peers and timing,
the agents' streams, heartbeats and leases, the cluster token.

A base of `config.Settings`, never built on its own. Split from `config` only for size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings

from gpu_platform.adapters.outbound.cpu_affinity import parse_cpus

__all__ = ["ReplicationSettings"]


class ReplicationSettings(BaseSettings):
    """The replication settings (fields of `Settings`, in its order)."""

    server_id: int = Field(
        1,
        ge=0,
        description="This server's Raft id (its entry in `peers`). 0 = the embedded control "
        "plane: no Raft and no agents, jobs run in this process (for embedding the library).",
    )
    peers: str = Field(
        "",
        description="Raft voters as id=host:port[,id=host:port...] (each server's Raft "
        "address; this server listens on its own). Empty = a one-voter cluster on "
        "`raft_port`.",
    )
    raft_port: int = Field(
        7001,
        ge=0,
        le=65535,
        description="Raft port of a one-voter cluster (peers empty) on `host`; 0 = any free "
        "port. With peers, this server's entry there gives the port.",
    )
    join: bool = Field(
        False,
        description="Replicated: this server joins a running cluster (it bootstraps no "
        "configuration; add it with `gpu-platform cluster add-server`).",
    )
    agent_port: int = Field(
        50053,
        ge=0,
        le=65535,
        description="Port of the agents' stream API on `host` (0 = any free port).",
    )
    advertise_host: str | None = Field(
        None,
        description="Host name clients and agents are redirected to for this server "
        "(default: `host`, or 127.0.0.1 when `host` is a wildcard).",
    )
    local_agent: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Also run an agent in this process for this host's GPUs: auto = on for a "
        "one-voter cluster (peers empty), off when peers are given.",
    )
    raft_tick_seconds: float = Field(
        0.05,
        gt=0,
        description="Raft tick length; the leader heartbeats every tick (50 ms heartbeat, 10x "
        "election timeout, in etcd's low-latency range; a leader whose process ends is found "
        "by its link closing, at the next tick; docs/raft.md has the budget).",
    )
    raft_election_ticks: int = Field(
        10,
        ge=2,
        description="Election timeout in ticks: a follower that hears no leader for a random "
        "time in [N, 2N) ticks campaigns (pre-vote and check-quorum on; 500-1000 ms by default).",
    )
    raft_transport: Literal["grpc", "tcp"] = Field(
        "tcp",
        description="How Raft messages travel between servers: tcp (the default: plain "
        "sockets, or TLS, written from the Raft loop: fewer thread hand-offs, faster "
        "single-client commits) or grpc (grpcio streams); docs/raft.md has the figures. Same "
        "TLS, token and member rules; every server of a cluster must use the same one.",
    )
    cpu_priority: Literal["normal", "high", "realtime"] = Field(
        "normal",
        description="high: what etcd's tuning guide does with renice for etcd on a shared "
        "machine, from inside: the server's threads (and its autogroup, when it leads its own "
        "session) run at nice -10, so that a loaded machine does not starve a live leader into "
        "elections. realtime: high, and the threads that keep leadership (the Raft loop, the "
        "heartbeat keeper, the Raft transport's thread) under the real-time SCHED_RR policy "
        "(more CPU: they no longer wait to batch). docs/raft.md, CPU priority. Needs "
        "CAP_SYS_NICE (or RLIMIT_NICE / RLIMIT_RTPRIO); refused, one warning and normal priority.",
    )
    cpu_affinity: str = Field(
        "auto",
        description="The CPUs the server's threads run on: auto, the default (one CPU of "
        "those the server may use, by role: the leader the last of the fastest, a follower one "
        "of the others by server_id; moved when the role changes, and off a CPU other programs "
        "crowd), off (wherever the kernel puts them) or a list such as 2 or 0,4-5. Its Python "
        "threads take turns on the GIL; on one core they hand it over without waking another "
        "core (docs/operations.md, CPU affinity). API workers and jobs keep every CPU.",
    )
    raft_snapshot_entries: int = Field(
        10_000, ge=0, description="Applied log entries between state snapshots (0 = never)."
    )
    agent_transport: Literal["grpc", "tcp"] = Field(
        "tcp",
        description="How agents' streams travel to the leader: tcp (the default: the "
        "agent protocol's messages as length-prefixed frames on plain sockets or TLS, less "
        "CPU per message on both ends) or grpc (grpcio streams). docs/replication.md. Same "
        "TLS, token and member rules; every server and agent of a cluster must use the same one.",
    )
    agent_heartbeat_seconds: float = Field(
        1.0, gt=0, description="How often agents send a heartbeat on their stream."
    )
    agent_lease_seconds: float = Field(
        3.0,
        gt=0,
        description="An agent whose heartbeats the leader has not acknowledged for this long "
        "(counted from the sending of the last acknowledged one) stops its tasks itself.",
    )
    cluster_token: str | None = Field(
        None,
        min_length=16,
        description="The cluster's shared secret: agents and joining servers present it; a "
        "one-voter server with none creates <data_dir>/cluster-token (docs/replication.md).",
    )
    cluster_token_file: Path | None = Field(
        None, description="Read the cluster token from this file (e.g. a server's cluster-token)."
    )
    agent_fence_grace_seconds: float = Field(
        1.0,
        gt=0,
        description="SIGTERM-to-SIGKILL grace when an agent's lease has run out.",
    )

    @field_validator("cpu_affinity")
    @classmethod
    def _cpu_list(cls, value: str) -> str:
        value = value.strip().lower()
        if value not in ("off", "auto"):
            parse_cpus(value)  # ValueError names the part
        return value

    @field_validator("local_agent", mode="before")
    @classmethod
    def _local_agent_bool(cls, value: object) -> object:
        """true/false (the --local-agent flag, old configurations) mean on/off."""
        if isinstance(value, bool):
            return "on" if value else "off"
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "false", "0", "no"):
            return "on" if value.lower() in ("true", "1", "yes") else "off"
        return value

    @property
    def lease_renewal_window_seconds(self) -> float:
        """A leader renews its agents' leases only while a quorum of voters sent it a
        message of its term this recently (`application.raft_contact`): one election timeout."""
        return self.raft_tick_seconds * self.raft_election_ticks

    @property
    def runs_local_agent(self) -> bool:
        """Whether this (replicated) server runs an agent in its own process."""
        if self.server_id == 0:
            return False
        if self.local_agent == "auto":
            return not self.peers.strip()
        return self.local_agent == "on"
