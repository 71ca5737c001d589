"""The Raft driver's handling of one `Ready`: steps 0 to 3 of `raft_node`'s theory of operation.

`ReadyHandling` is a mixin of `RaftNode` (`raft_node`), run on the Raft loop: it sends a
leader's AppendEntries and heartbeats before its own write, persists (a commit move alone
rides along with the next write), sends the rest, hands committed entries and confirmed reads
to the applier and applies conf changes to the core and the transport at once. It also follows
the role and the leader the `Ready`s report (failing a lost leader's pending work) and builds
the `RaftNodeStatus` the loop publishes. Split from `raft_node` only for size; it shares
`RaftNode`'s attributes and is not used alone.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future

from gpu_platform.application.raft_applier import (
    Applier,
    Committed,
    LeadershipLost,
    ReadWait,
    Restore,
)
from gpu_platform.application.raft_errors import InvalidMembershipChange, NotLeader
from gpu_platform.application.raft_heartbeat import HeartbeatKeeper
from gpu_platform.application.raft_membership import decode_addresses
from gpu_platform.application.raft_node_types import RaftNodeStatus
from gpu_platform.application.raft_proposals import ProposalBatch
from gpu_platform.application.raft_proposals import fail_future as _fail
from gpu_platform.application.raft_snapshots import SnapshotKeeping
from gpu_platform.application.raft_stalls import StallWatch
from gpu_platform.domain.consensus import (
    NONE,
    ConfChange,
    ConfChangeError,
    ConfChangeType,
    ConfState,
    EntryType,
    Message,
    MessageType,
    RawNode,
    Ready,
    Role,
    SoftState,
)
from gpu_platform.ports.outbound.metrics import RaftMetrics

__all__ = ["ReadyHandling"]

# The driver's lines keep `raft_node`'s logger name (this module was split from it).
log = logging.getLogger("gpu_platform.application.raft_node")

# What a leader may send before its own write (step 0): they vouch for nothing on its disk.
_EARLY = frozenset({MessageType.APP, MessageType.HEARTBEAT})


class ReadyHandling(SnapshotKeeping):
    """Persist, send, hand over each `Ready`; follow role and leader; publish status."""

    rawnode: RawNode
    metrics: RaftMetrics
    _applier: Applier
    _keeper: HeartbeatKeeper
    _stalls: StallWatch
    _batch: ProposalBatch
    _reads: dict[bytes, Future[int]]
    _lead: int
    _role: Role
    _was_leader: bool
    _leader_term: int
    _running: bool
    _status: RaftNodeStatus

    def _not_leader(self) -> NotLeader:
        lead = self.rawnode.raft.lead
        if lead == NONE:
            return NotLeader(None, None)
        return NotLeader(lead, self.transport.addresses.get(lead))

    def _process_ready(self) -> None:
        rn = self.rawnode
        while rn.has_ready():
            rd = rn.ready()
            early, late = self._split_messages(rd)
            writes = bool(rd.entries_to_persist) or rd.snapshot is not None
            if early and writes:  # overlap the followers' fsyncs with ours
                self.transport.send(early)
                self._keeper.record(early)
                early = []
            self._persist(rd)
            # Nothing written (a commit move): the client's answer goes first, the commit news
            # to the followers after; not a conf change's (it may add or remove a peer).
            first = not writes and not any(
                e.type is EntryType.CONF_CHANGE for e in rd.committed_entries
            )
            if first:
                self._hand_over(rd)
            for m in late:
                if m.type is MessageType.SNAP and m.snapshot is not None:
                    md = m.snapshot.metadata
                    log.info(
                        "raft node %d: sending snapshot %d (%d bytes) to %d",
                        self.config.id,
                        md.index,
                        len(m.snapshot.data),
                        m.to,
                    )
            late = early + late
            if late:
                self.transport.send(late)
                if rn.raft.state is Role.LEADER:
                    self._keeper.record(late)
            if not first:
                self._hand_over(rd)
            if rd.soft_state is not None:
                self._observe_leader(rd.soft_state)
                self._on_role(rd.soft_state.role)
            rn.advance(rd)

    def _split_messages(self, rd: Ready) -> tuple[list[Message], list[Message]]:
        """(sent before the write, sent after it): see step 0 of the module docstring."""
        if not rd.messages:
            return [], []
        hs, durable = rd.hard_state, self._hard
        same_vote = hs is None or (hs.term == durable.term and hs.vote == durable.vote)
        if self.rawnode.raft.state is not Role.LEADER or not same_vote:
            return [], list(rd.messages)
        early: list[Message] = []
        late: list[Message] = []
        for m in rd.messages:
            (early if m.type in _EARLY and m.term == durable.term else late).append(m)
        return early, late

    def _persist(self, rd: Ready) -> None:
        hs, durable = rd.hard_state, self._hard
        commit_only = rd.snapshot is None and not rd.entries_to_persist and hs is not None
        if commit_only and hs is not None and (hs.term, hs.vote) == (durable.term, durable.vote):
            self._unsaved_commit = hs  # a commit move alone: written with the next save
            return
        if hs is None:
            hs = self._unsaved_commit
        if rd.snapshot is not None or rd.entries_to_persist or hs is not None:
            sync = rd.must_sync or rd.snapshot is not None
            t0 = time.monotonic()
            self.storage.save(hs, rd.entries_to_persist, rd.snapshot, sync=sync)
            took = time.monotonic() - t0
            if took > self._slow_s:
                log.warning("raft node %d: storage write took %.0f ms", self.config.id, took * 1000)
            if hs is not None:
                self._hard = hs
            self._unsaved_commit = None
        if rd.snapshot is not None:
            md = rd.snapshot.metadata
            data = self._restore_addresses(rd.snapshot)
            self._conf_state = self._shown_conf = md.conf_state
            self._applier.submit(Restore(md.index, data))

    def _hand_over(self, rd: Ready) -> None:
        """Committed entries (and confirmed reads) to the applier, in log order. Conf changes
        are applied to the core and the transport now; a batch ends at a conf change the
        stored snapshot does not name, so that the applier snapshots at exactly its index."""
        entries = rd.committed_entries
        start = 0
        outcomes: dict[int, ConfState | BaseException] = {}
        for n, e in enumerate(entries):
            if e.type is not EntryType.CONF_CHANGE:
                continue
            try:
                outcomes[e.index] = self._apply_conf_change(e.index, ConfChange.decode(e.data))
            except ConfChangeError as exc:  # every node refuses it alike: deterministic
                log.error("node %d: conf change %d refused: %s", self.config.id, e.index, exc)
                outcomes[e.index] = InvalidMembershipChange(str(exc))
                continue
            if not self._snapshot_lacks_members(e.index):
                if not self._conf_wait:
                    self._shown_conf = self._conf_state
            else:
                self._conf_wait = e.index
                part = tuple(entries[start : n + 1])
                self._applier.submit(Committed(part, self._conf_state, outcomes, True))
                start, outcomes = n + 1, {}
        if start < len(entries):
            self._applier.submit(Committed(tuple(entries[start:]), self._conf_state, outcomes))
        for rs in rd.read_states:
            rfut = self._reads.pop(rs.request_ctx, None)
            if rfut is not None:
                self._applier.submit(ReadWait(rs.index, rfut))

    def _apply_conf_change(self, index: int, change: ConfChange) -> ConfState:
        """Apply a committed conf change to the core and the transport's address book."""
        cs = self.rawnode.apply_conf_change(change)
        self._conf_state = cs
        try:
            addresses = decode_addresses(change.context)
        except ValueError as exc:
            log.error("node %d: conf change at %d: %s", self.config.id, index, exc)
            addresses = {}
        for c in change.changes:
            if c.node_id == self.config.id:
                continue
            if c.type is ConfChangeType.REMOVE_NODE:
                self.transport.remove_peer(c.node_id)
            elif c.node_id in addresses:
                self.transport.add_peer(c.node_id, addresses[c.node_id])
            elif c.node_id not in self.transport.addresses:
                log.warning("node %d: no address for new member %d", self.config.id, c.node_id)
        return cs

    def _observe_leader(self, soft: SoftState) -> None:
        if soft.lead != self._lead:
            self._lead = soft.lead
            lead = None if soft.lead == NONE else soft.lead
            self.metrics.leader_changed(lead, self.rawnode.raft.term)

    def _on_role(self, role: Role) -> None:
        if role is not self._role:  # a line per transition: failovers can be read from logs
            self._role = role
            why = ""
            if role is Role.PRE_CANDIDATE or role is Role.CANDIDATE:
                why = f" ({self._stalls.describe(time.monotonic())})"
            else:
                self._stalls.heard(time.monotonic())  # a new period with the new role
            log.info(
                "raft node %d: %s in term %d%s",
                self.config.id,
                role.value,
                self.rawnode.raft.term,
                why,
            )
        leader = role is Role.LEADER
        if leader and not self._was_leader:
            self._leader_term = self.rawnode.raft.term
        if not leader:
            self._keeper.clear()
        if self._was_leader and not leader:
            err = self._not_leader()
            self._batch.fail(err)
            # After the entries handed over before: those committed still resolve first.
            self._applier.submit(LeadershipLost(self._leader_term, err))
            for rfut in self._reads.values():
                _fail(rfut, err)
            self._reads.clear()
        self._was_leader = leader

    def _lost(self) -> NotLeader:
        """A proposal's index got another entry (or a snapshot): on the applier thread, from
        the published status."""
        st = self._status
        return NotLeader(st.leader_id, st.leader_address)

    def _snapshot_status(self) -> RaftNodeStatus:
        r = self.rawnode.raft
        lead = r.lead if r.lead != NONE else None
        return RaftNodeStatus(
            id=self.config.id,
            role=r.state,
            leader_id=lead,
            leader_address=None if lead is None else self.transport.addresses.get(lead),
            term=r.term,
            commit=r.raft_log.committed,
            applied=self._applier.applied,
            last_index=r.raft_log.last_index(),
            snapshot_index=self.storage.snapshot_metadata().index,
            voters=self._shown_conf.voters,
            running=self._running,
            learners=self._shown_conf.learners,
        )
