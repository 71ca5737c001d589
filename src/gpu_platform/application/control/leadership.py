"""Leadership (replicated): follow this server's Raft role, and answer where the leader is.

Taking the lead announces where this server's APIs listen and treats every attempt holding
GPUs as still running until its agent says otherwise; leaving it ends the agents' streams,
pointing them at the new leader. Reads go through `read_barrier` (ReadIndex on the leader);
a server that does not lead answers `LeaderElsewhere`, naming the leader's addresses.
The embedded control plane always leads: these calls are no-ops or trivial there.
"""

from __future__ import annotations

import structlog

from gpu_platform.application.consistency import (
    LeaderElsewhere,
    barrier_passed,
    mark_barrier_passed,
    stale_reads_allowed,
)
from gpu_platform.application.control.shared import LOG_NAME, Run, Shared
from gpu_platform.application.raft_node import NotLeader
from gpu_platform.domain.cluster_state import AnnounceServer

__all__ = ["Leadership"]

log = structlog.get_logger(LOG_NAME)


class Leadership:
    """Takes and leaves the lead as the Raft role changes; knows where the leader listens."""

    def __init__(self, shared: Shared) -> None:
        self._s = shared

    def lead(self) -> bool:
        """Follow this server's role: take the lead or leave it; True while leading."""
        assert self._s.replication is not None
        leading = self._s.replication.is_leader()
        if leading and not self._s.leading:
            self._take_lead()
        elif not leading and self._s.leading:
            self._leave_lead()
        return self._s.leading

    def _take_lead(self) -> None:
        """Announce where our APIs listen, then treat every attempt holding GPUs as still
        running until its agent says otherwise (agents reconnect to us and reconcile)."""
        assert self._s.replication is not None
        http, grpc_address, agents = self._s.addresses
        now = self._s.now()
        sid = self._s.replication.server_id
        self._s.execute(AnnounceServer(sid, http, grpc_address, now, agent_address=agents))
        with self._s.lock:
            self._s.leader_since = now
            self._s.agents_seen.clear()
            self._s.beats.clear()  # every node gets a fresh grace period from `now`
            self._s.beats_committed.clear()
            self._s.runs.clear()
            for job in self._s.state.jobs():
                if job.holds_gpus and job.allocation is not None:
                    tasks = len(job.allocation.tasks)
                    run = Run(tasks, live=set(range(tasks)))
                    self._s.runs[(job.id, job.allocation.epoch)] = run
            self._s.leading = True
        log.info("leading the cluster", server=sid, running=len(self._s.runs))

    def _leave_lead(self) -> None:
        with self._s.lock:
            self._s.leading = False
            self._s.runs.clear()
            self._s.nominated.clear()
        leader = self.accepting() or ""
        log.info("no longer leading", leader_agents=leader)
        if self._s.hub is not None:
            self._s.hub.step_down(leader)

    def judging_nodes(self) -> bool:
        """Replicated, a new leader gives agents one suspect period to reconnect before it
        judges heartbeat ages (the committed ones may predate the failover)."""
        if self._s.replication is None:
            return True
        grace = self._s.state.policy.node_suspect_after_s
        return self._s.now() - self._s.leader_since >= grace

    def accepting(self) -> str | None:
        """None while this server leads (and is not stopping); else the leader's agent
        address as known here ("" when unknown)."""
        if self._s.leading and not self._s.stopping.is_set():
            return None
        return self.leader_addresses()[3]

    def leader_addresses(self) -> tuple[int | None, str, str, str]:
        """(leader id, its REST URL, gRPC address, agent address) as this server knows them."""
        if self._s.replication is None:
            return None, *self._s.addresses
        leader = self._s.replication.leader_id()
        with self._s.lock:
            where = self._s.state.servers.get(leader) if leader else None
        if where is None:
            return leader, "", "", ""
        return leader, *where

    def read_barrier(self) -> None:
        """Replicated reads: linearizable on the leader (ReadIndex), refused elsewhere unless
        the caller accepts this replica's possibly stale state."""
        if self._s.replication is None or stale_reads_allowed() or barrier_passed():
            return
        if self._s.applied._is_owned():  # type: ignore[attr-defined]
            return  # called while applying a command (an event subscriber): the state is current
        try:
            self._s.replication.read_barrier()
        except NotLeader:
            raise self.elsewhere() from None
        mark_barrier_passed()  # the rest of this request reads at least this fresh

    def elsewhere(self) -> LeaderElsewhere:
        leader, http, grpc_address, _ = self.leader_addresses()
        return LeaderElsewhere(leader, http, grpc_address)
