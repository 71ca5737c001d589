"""Membership (replicated): who the Raft servers are, and operators' changes to them.

`cluster()` describes the servers (voters and the addresses each announced) and the agents
connected to this leader. Adding, removing and handing the lead to a server are leader-only,
audited operations; a change that Raft refuses or that does not finish in time is a Conflict.
The embedded control plane reports itself as a one-server cluster and has no membership.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from gpu_platform.application.consistency import LeaderElsewhere
from gpu_platform.application.control.shared import Shared
from gpu_platform.application.raft_node import NotLeader, RaftNode, RaftNodeError
from gpu_platform.domain.errors import Conflict, InvalidRequest, NotFound
from gpu_platform.ports.inbound.admin_service import ClusterInfo, ServerInfo

__all__ = ["Membership"]


class Membership:
    """Raft membership as the AdminService shows and changes it. `elsewhere` is the
    leadership's answer off the leader; `record` appends to the audit log."""

    def __init__(
        self,
        shared: Shared,
        *,
        elsewhere: Callable[[], LeaderElsewhere],
        record: Callable[[str, str, str, str, str], None],
    ) -> None:
        self._s = shared
        self._elsewhere = elsewhere
        self._record = record

    def cluster(self) -> ClusterInfo:
        agents = self._s.hub.connected() if self._s.hub is not None and self._s.leading else {}
        if self._s.replication is None:
            http, grpc_address, agent = self._s.addresses
            me = ServerInfo(0, True, http, grpc_address, agent)
            return ClusterInfo("embedded", 0, "leader", 0, 0, 0, 0, (me,), agents)
        st = self._s.replication.node.status()
        with self._s.lock:
            known = dict(self._s.state.servers)
        servers = tuple(
            ServerInfo(
                sid,
                sid in st.voters,
                *known.get(sid, ("", "", "")),
            )
            for sid in sorted(set(st.voters) | set(known))
        )
        return ClusterInfo(
            "replicated",
            st.id,
            st.role.name.lower(),
            st.term,
            st.leader_id,
            st.commit,
            st.applied,
            servers,
            agents,
        )

    def _membership(
        self, actor: str, verb: str, target: str, change: Callable[[], object]
    ) -> ClusterInfo:
        if self._s.replication is None:
            raise InvalidRequest("server", "the embedded control plane has no Raft membership")
        if not self._s.replication.is_leader():
            raise self._elsewhere()
        try:
            outcome = change()
            if isinstance(outcome, Future):
                outcome.result(timeout=30)
        except NotLeader:
            self._record(actor, verb, target, "", "refused: not the leader")
            raise self._elsewhere() from None
        except (RaftNodeError, FutureTimeout) as exc:
            self._record(actor, verb, target, "", f"refused: {exc}")
            raise Conflict(f"{verb} {target}: {exc or 'timed out'}") from None
        self._record(actor, verb, target, "", "ok")
        return self.cluster()

    def add_server(self, server_id: int, address: str, *, actor: str) -> ClusterInfo:
        if server_id < 1:
            raise InvalidRequest("id", f"must be a positive integer, got {server_id}")
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise InvalidRequest("address", f"expected host:port, got {address!r}")
        assert_replicated = self._s.replication
        if assert_replicated is not None and server_id in assert_replicated.node.status().voters:
            raise Conflict(f"server {server_id} is already a member")
        return self._membership(
            actor,
            "add-server",
            f"server {server_id} at {address}",
            lambda: self._raft().add_voter(server_id, address),
        )

    def remove_server(self, server_id: int, *, actor: str) -> ClusterInfo:
        if self._s.replication is not None and server_id not in self._raft().status().voters:
            raise NotFound("server", str(server_id))
        return self._membership(
            actor,
            "remove-server",
            f"server {server_id}",
            lambda: self._raft().remove_voter(server_id),
        )

    def transfer_leader(self, server_id: int, *, actor: str) -> ClusterInfo:
        if self._s.replication is not None and server_id not in self._raft().status().voters:
            raise NotFound("server", str(server_id))

        def transfer() -> None:
            raft = self._raft()
            raft.transfer_leadership(server_id)
            deadline = time.monotonic() + 20 * raft.config.tick_interval * raft.config.election_tick
            while time.monotonic() < deadline:
                if raft.status().leader_id == server_id:
                    return
                time.sleep(raft.config.tick_interval)
            raise RaftNodeError(f"server {server_id} did not take over")

        return self._membership(actor, "transfer-leader", f"server {server_id}", transfer)

    def _raft(self) -> RaftNode:
        assert self._s.replication is not None
        return self._s.replication.node
