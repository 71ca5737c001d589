"""`RaftNode`: the Raft driver — a `RawNode` wired to durable storage, a transport and a
replicated state machine, on one thread.

Theory of operation. Everything that touches the `RawNode` runs on one thread, the *Raft
loop*. Other threads talk to it through an inbox queue: messages from the transport, client
proposals and reads, transport reports, stop. The loop takes whatever is queued — proposals
from every caller go into one `ProposalBatch` appended with a single `propose_many` (group
commit: one append, one storage write, one fsync per batch, see `raft_proposals`) — ticks the
`RawNode` every `tick_interval` seconds, and handles each `Ready` in the order Raft's safety
needs:

0. **send early (leader only)** — a leader's AppendEntries and heartbeats go out *before* its
   own write, so the followers' fsyncs overlap the leader's (Raft thesis §10.2.1; etcd does
   the same). This cannot commit anything the leader has not made durable: acknowledgements
   are handled on this same thread, after step 1 returns, so the quorum that commits an entry
   always includes the leader's durable copy. Only when the Ready changes neither term nor
   vote; everything else waits for step 2;
1. **persist** — `storage.save(hard_state, entries_to_persist, snapshot, sync)`: one atomic
   write, fsynced when the Ready says `must_sync` (new entries, term or vote); a received
   snapshot is also restored into the state machine here. A Ready that only moves the commit
   index writes nothing: the commit index is volatile state in Raft (Figure 2), so it rides
   along with the next write (or a snapshot, or stop) instead of costing a transaction per
   commit on every node;
2. **send** — `transport.send(messages)` for the rest: never before 1, so no vote or
   follower's acknowledgement outruns the disk;
3. **hand over** — committed entries go to the `Applier` (`raft_applier`), a thread of its
   own that calls `StateMachine.apply(index, data)` in log order and resolves the proposal
   future for that index with the result, and read-index futures once the applied index
   reaches them. The Raft loop never waits for the state machine (or its lock): a long
   scheduling cycle holding that lock delays applying, never a heartbeat or a vote. Conf
   changes are applied to the `RawNode` and the transport here, at once;
4. **advance** — every `snapshot_entries` applied entries the applier encodes the state
   machine at that index (and, with a `SnapshotStaging` storage, writes its bytes ahead)
   and hands it back; the loop stores it (a staged one: one small write) and compacts the
   log (keeping `compact_keep` entries for slow followers).

A proposal is only taken by the leader: elsewhere its future fails with `NotLeader` naming the
known leader and its address. The leader remembers (index, term) of each proposal; when the
entry at that index is applied with that term the future gets the state machine's result; if a
different entry lands there, or this node loses leadership first, the future fails with
`NotLeader` — the outcome is then unknown (the entry may still commit under the new leader),
so commands should be idempotent or carry an id. On restart the node loads its hard state,
log and snapshot from storage, restores the state machine from the snapshot, and re-applies
the committed entries after it.

Membership (see `raft_membership`): `propose_conf_change` (or `add_voter` / `remove_voter`)
is taken by the leader only, one change at a time (`MembershipChangeInProgress` otherwise), and
its future resolves with the new `ConfState` once the entry is applied here. Every node,
applying a conf change, tells its transport the new peer's address (carried in the entry's
context) or forgets a removed one, and, when the stored snapshot does not name every member,
stores a snapshot at that index: a server that joins with an empty log (`join=True`, nothing
bootstrapped) is brought up to date from a snapshot whose configuration includes it. On
restart the configuration comes from storage (the snapshot's, then the conf entries after it
as they are re-applied), never from `RaftNodeConfig.voters`.

An optional `RaftMetrics` hears each leader change this node learns of and, for proposals it
took as leader, the time from proposal to apply (the commit latency a client sees).

Errors: `raft_errors` (re-exported here).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import random
import threading
import time
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from gpu_platform.application.raft_applier import (
    Applier,
    ChunkedStateMachine,
    Committed,
    LeadershipLost,
    MadeSnapshot,
    ReadWait,
    Restore,
    StateMachine,
)
from gpu_platform.application.raft_errors import (
    InvalidMembershipChange,
    MembershipChangeInProgress,
    NodeStopped,
    NotLeader,
    RaftNodeError,
)
from gpu_platform.application.raft_heartbeat import HeartbeatKeeper
from gpu_platform.application.raft_membership import (
    PENDING,
    add_voter_change,
    decode_addresses,
    refusal,
    remove_voter_change,
    snapshot_header,
    unwrap_snapshot,
)
from gpu_platform.application.raft_node_types import RaftNodeConfig, RaftNodeStatus
from gpu_platform.application.raft_proposals import (
    PendingProposals,
    ProposalBatch,
    fail_future,
)
from gpu_platform.application.raft_stalls import StallWatch
from gpu_platform.domain.consensus import (
    NONE,
    ConfChange,
    ConfChangeError,
    ConfChangeType,
    Config,
    ConfState,
    EntryType,
    HardState,
    Message,
    MessageType,
    ProposalDroppedError,
    RawNode,
    ReadOnlyOption,
    Ready,
    Role,
    Snapshot,
    SnapshotMetadata,
    SoftState,
)
from gpu_platform.ports.outbound.metrics import NoRaftMetrics, RaftMetrics
from gpu_platform.ports.outbound.raft import RaftStorage, RaftTransport, SnapshotStaging

__all__ = [
    "ChunkedStateMachine",
    "InvalidMembershipChange",
    "MembershipChangeInProgress",
    "NodeStopped",
    "NotLeader",
    "RaftNode",
    "RaftNodeConfig",
    "RaftNodeError",
    "RaftNodeStatus",
    "StateMachine",
]

log = logging.getLogger(__name__)


_Item = tuple[str, object, object]
# What a leader may send before its own write (step 0): they vouch for nothing on its disk.
_EARLY = frozenset({MessageType.APP, MessageType.HEARTBEAT})


class RaftNode:
    """A Raft peer: see the module docstring. Thread-safe public methods."""

    def __init__(
        self,
        config: RaftNodeConfig,
        storage: RaftStorage,
        transport: RaftTransport,
        state_machine: StateMachine,
        metrics: RaftMetrics | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics or NoRaftMetrics()
        self._lead = NONE
        self.storage = storage
        self.transport = transport
        self.state_machine = state_machine
        self._inbox: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._batch = ProposalBatch()  # proposals taken this drain, not yet appended
        self._proposals = PendingProposals()  # appended, awaiting apply
        self._reads: dict[bytes, Future[int]] = {}  # ReadIndex asked, not yet confirmed
        self._read_seq = 0
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._running = False
        self._was_leader = False
        self._leader_term = 0  # the term this node last led in
        self._role = Role.FOLLOWER
        # Half an election timeout: a stall this long is logged (followers may time out).
        self._slow_s = config.tick_interval * config.election_tick / 2
        self._bootstrap_if_empty()
        self._hard, _ = storage.initial_state()  # the durable hard state
        self._unsaved_commit: HardState | None = None  # a commit move not written yet
        snap = storage.snapshot()
        self.state_machine.restore(self._restore_addresses(snap))
        self._conf_state = snap.metadata.conf_state
        # What status() shows: a change that needs a snapshot naming its members is shown
        # once that snapshot is stored (`_conf_wait`: its index, 0 = none).
        self._shown_conf = self._conf_state
        self._conf_wait = 0
        self._applier = Applier(
            config.id,
            state_machine,
            self._proposals,
            self.metrics,
            applied=snap.metadata.index,
            snapshot_entries=config.snapshot_entries,
            header=self._snapshot_header,
            on_snapshot=lambda made: self._inbox.put(("snapshot", made, None)),
            lost=self._lost,
            staging=storage if isinstance(storage, SnapshotStaging) else None,
        )
        cover_s = config.tick_interval * config.heartbeat_cover_ticks
        self._keeper = HeartbeatKeeper(config.id, transport, config.tick_interval, cover_s)
        # A tick later than 2 intervals is a stall of this node (`raft_stalls`).
        self._stalls = StallWatch(config.id, config.tick_interval, 2 * config.tick_interval)
        rng = random.Random(config.seed if config.seed is not None else time.time_ns())
        self.rawnode = RawNode(self._raft_config(snap.metadata.index), storage, rng)
        self._status = self._snapshot_status()

    # ------------------------------------------------------------------ setup
    def _raft_config(self, applied: int) -> Config:
        c = self.config
        return Config(
            id=c.id,
            election_tick=c.election_tick,
            heartbeat_tick=c.heartbeat_tick,
            applied=applied,
            max_size_per_msg=c.max_size_per_msg,
            max_inflight_msgs=c.max_inflight_msgs,
            check_quorum=c.check_quorum,
            pre_vote=c.pre_vote,
            read_only_option=ReadOnlyOption.SAFE,
        )

    def _bootstrap_if_empty(self) -> None:
        """A brand-new node of a brand-new cluster: the configuration as a snapshot at 1.

        A joining node bootstraps nothing: its configuration arrives from the leader."""
        s = self.storage
        if self.config.join:
            return
        hs, _ = s.initial_state()
        if hs.is_empty() and s.snapshot_metadata().index == 0 and s.last_index() == 0:
            cs = ConfState(voters=tuple(sorted(self.config.voters)))
            boot = Snapshot(b"", SnapshotMetadata(cs, index=1, term=1))
            s.save(HardState(term=1, commit=1), (), boot)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the transport and the Raft loop."""
        if self._thread is not None:
            raise RuntimeError("already started")
        self.transport.start(
            lambda m: self._inbox.put(("msg", m, None)),
            lambda peer: self._inbox.put(("unreachable", peer, None)),
            lambda peer, ok: self._inbox.put(("snap_status", peer, ok)),
        )
        self._running = True
        self._applier.start()
        self._keeper.start()
        self._thread = threading.Thread(target=self._run, name=f"raft-{self.config.id}")
        self._thread.daemon = True
        self._thread.start()
        if self._conf_state.voters == (self.config.id,) and not self._conf_state.learners:
            self.campaign()  # the only voter: nobody to wait for, lead now

    def stop(self) -> None:
        """Stop the loop and the transport; pending futures fail with `NodeStopped`.

        Storage stays open (the caller owns it) so a node can be rebuilt over it.
        """
        if self._thread is None:
            return
        if self._thread.is_alive():
            self._inbox.put(("stop", None, None))
            self._thread.join(timeout=30)
        self.transport.stop()

    # ------------------------------------------------------------------ client API
    def propose(self, data: bytes) -> Future[object]:
        """Replicate `data`; the future gets `StateMachine.apply`'s result on this node.

        Fails with `NotLeader` (not the leader, or lost leadership before the entry was
        applied) or `NodeStopped`.
        """
        fut: Future[object] = Future()
        if not self._running:
            fut.set_exception(NodeStopped())
        else:
            self._inbox.put(("propose", data, fut))
        return fut

    def read_index(self) -> Future[int]:
        """A linearizable read barrier: resolves to an index once this node (the leader) has
        confirmed its leadership with a quorum and applied up to that index, so reading the
        state machine afterwards sees every write acknowledged before the call."""
        fut: Future[int] = Future()
        if not self._running:
            fut.set_exception(NodeStopped())
        else:
            self._inbox.put(("read", None, fut))
        return fut

    def propose_conf_change(self, change: ConfChange) -> Future[ConfState]:
        """Replicate a membership change; the future gets the new `ConfState` once applied here.

        Only the leader takes it. Fails with `NotLeader`, `MembershipChangeInProgress` (another
        change is not applied yet), `InvalidMembershipChange` or `NodeStopped`. New members'
        addresses go in `change.context` as b"ID=HOST:PORT[,...]".
        """
        fut: Future[ConfState] = Future()
        if not self._running:
            fut.set_exception(NodeStopped())
        else:
            self._inbox.put(("conf", change, fut))
        return fut

    def add_voter(self, node_id: int, address: str) -> Future[ConfState]:
        """Add voter `node_id`, reachable at `address` (HOST:PORT); see `propose_conf_change`."""
        try:
            change = add_voter_change(node_id, address)
        except ValueError as exc:
            return _failed(InvalidMembershipChange(str(exc)))
        return self.propose_conf_change(change)

    def remove_voter(self, node_id: int) -> Future[ConfState]:
        """Remove `node_id` (a leader removing itself steps down once the change is applied)."""
        try:
            change = remove_voter_change(node_id)
        except ValueError as exc:
            return _failed(InvalidMembershipChange(str(exc)))
        return self.propose_conf_change(change)

    def status(self) -> RaftNodeStatus:
        """The state the loop last published, with the applier's current applied index
        (never blocks)."""
        st, applied = self._status, self._applier.applied
        return st if st.applied == applied else replace(st, applied=applied)

    def leader(self) -> tuple[int | None, str | None]:
        s = self._status
        return s.leader_id, s.leader_address

    def campaign(self) -> None:
        """Start an election at this node now (ignored by peers that still hear a leader)."""
        self._inbox.put(("campaign", None, None))

    def transfer_leadership(self, to: int) -> None:
        """Ask the leader (this node or, forwarded, the current one) to hand over to `to`;
        best effort — watch `status()` for the outcome."""
        self._inbox.put(("transfer", to, None))

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        interval = self.config.tick_interval
        next_tick = time.monotonic() + interval
        try:
            while True:
                timeout = max(0.0, next_tick - time.monotonic())
                try:
                    item = self._inbox.get(timeout=timeout)
                except queue.Empty:
                    item = None
                if item is not None:
                    if not self._handle(item):
                        return
                    for _ in range(self.config.max_inbox_batch):
                        try:
                            more = self._inbox.get_nowait()
                        except queue.Empty:
                            break
                        if not self._handle(more):
                            return
                if self._batch:
                    self._append_batch()
                now = time.monotonic()
                if now >= next_tick:
                    if now - next_tick > self._slow_s:  # no heartbeat went out meanwhile
                        log.warning(
                            "raft node %d: tick %.0f ms late (loop busy or starved of CPU)",
                            self.config.id,
                            (now - next_tick) * 1000,
                        )
                    next_tick = self._tick(now, next_tick)
                self._process_ready()
                self._status = self._snapshot_status()
        except BaseException:
            log.exception("raft loop of node %d crashed", self.config.id)
            raise
        finally:
            self._shutdown()

    def _tick(self, now: float, due: float) -> float:
        """Tick the core (unless `raft_stalls` defers it); returns when the next tick is due."""
        interval, rn, stalls = self.config.tick_interval, self.rawnode, self._stalls
        stalls.ticked_late(now, now - due)
        # Never a leader's tick: it sends the heartbeats its followers wait for.
        follows = rn.raft.state is not Role.LEADER
        if follows and self.config.stall_defer and stalls.defer(now, rn.tick_ends_period()):
            return now + interval
        rn.tick()
        self._keeper.ticked()
        return max(due + interval, now)

    def _shutdown(self) -> None:
        self._running = False
        try:
            self._save_commit()
        except Exception:  # the storage failed (maybe why we stop): it is volatile state anyway
            log.exception("node %d: could not save the commit index on stop", self.config.id)
        self._keeper.stop()
        self._applier.stop()  # what was committed and handed over is applied first
        self._stopped.set()
        err = NodeStopped()
        self._batch.fail(err)
        self._proposals.fail_all(err)
        for rfut in self._reads.values():
            _fail(rfut, err)
        self._reads.clear()
        while True:  # requests that raced with stop
            try:
                kind, arg, waiter = self._inbox.get_nowait()
            except queue.Empty:
                break
            if kind in ("propose", "read", "conf") and isinstance(waiter, Future):
                _fail(waiter, err)
            elif isinstance(arg, MadeSnapshot):
                arg.close()
        self._status = self._snapshot_status()

    def _handle(self, item: _Item) -> bool:
        kind, arg, extra = item
        rn = self.rawnode
        if kind == "msg":
            assert isinstance(arg, Message)
            with contextlib.suppress(ProposalDroppedError):
                rn.step(arg)
            if arg.from_ == rn.raft.lead and rn.raft.state is not Role.LEADER:
                self._stalls.heard(time.monotonic())
        elif kind == "propose":
            assert isinstance(arg, bytes) and isinstance(extra, Future)
            self._propose(arg, extra)
        elif kind == "read":
            assert isinstance(extra, Future)
            self._read(extra)
        elif kind == "conf":
            assert isinstance(arg, ConfChange) and isinstance(extra, Future)
            self._propose_conf(arg, extra)
        elif kind == "unreachable":
            assert isinstance(arg, int)
            rn.report_unreachable(arg)
        elif kind == "snap_status":
            assert isinstance(arg, int)
            rn.report_snapshot(arg, bool(extra))
        elif kind == "snapshot":
            assert isinstance(arg, MadeSnapshot)
            self._store_snapshot(arg)
        elif kind == "campaign":
            rn.campaign()
        elif kind == "transfer":
            assert isinstance(arg, int)
            rn.transfer_leader(arg)
        elif kind == "stop":
            return False
        return True

    def _not_leader(self) -> NotLeader:
        lead = self.rawnode.raft.lead
        if lead == NONE:
            return NotLeader(None, None)
        return NotLeader(lead, self.transport.addresses.get(lead))

    def _propose(self, data: bytes, fut: Future[object]) -> None:
        r = self.rawnode.raft
        if r.state is not Role.LEADER or r.lead_transferee != NONE:
            _fail(fut, self._not_leader())
            return
        self._batch.add(data, fut, time.monotonic())

    def _append_batch(self) -> None:
        """Append the queued proposals as one batch (see `raft_proposals`)."""
        batch, r = self._batch, self.rawnode.raft
        if r.state is not Role.LEADER or r.lead_transferee != NONE:
            batch.fail(self._not_leader())
            return
        try:
            self.rawnode.propose_many(batch.payloads)
        except ProposalDroppedError:
            batch.fail(self._not_leader())
            return
        self._proposals.add_batch(batch, r.raft_log.last_index(), r.term)

    def _propose_conf(self, change: ConfChange, fut: Future[ConfState]) -> None:
        r = self.rawnode.raft
        if r.state is not Role.LEADER or r.lead_transferee != NONE:
            _fail(fut, self._not_leader())
            return
        if self._batch:  # keep log order = arrival order
            self._append_batch()
        why = refusal(r, change)
        if why is not None:
            pending = why == PENDING
            _fail(fut, MembershipChangeInProgress() if pending else InvalidMembershipChange(why))
            return
        try:
            self.rawnode.propose_conf_change(change)
        except ProposalDroppedError:
            _fail(fut, self._not_leader())
            return
        self._proposals.add(r.raft_log.last_index(), r.term, fut, time.monotonic(), conf=True)

    def _read(self, fut: Future[int]) -> None:
        if self.rawnode.raft.state is not Role.LEADER:
            _fail(fut, self._not_leader())
            return
        self._read_seq += 1
        ctx = b"r%d" % self._read_seq
        self._reads[ctx] = fut
        self.rawnode.read_index(ctx)

    def _process_ready(self) -> None:
        rn = self.rawnode
        while rn.has_ready():
            rd = rn.ready()
            early, late = self._split_messages(rd)
            if early:
                self.transport.send(early)
                self._keeper.record(early)
            self._persist(rd)
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
            if late:
                self.transport.send(late)
                if rn.raft.state is Role.LEADER:
                    self._keeper.record(late)
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

    def _save_commit(self) -> None:
        """Write a pending commit move (before a snapshot, whose index it must cover; on stop)."""
        hs = self._unsaved_commit
        if hs is not None:
            self.storage.save(hs, (), None, sync=False)
            self._hard = hs
            self._unsaved_commit = None

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

    def _snapshot_lacks_members(self, index: int) -> bool:
        """A server joining with an empty log is caught up by snapshot, and the core refuses a
        snapshot whose configuration does not name its receiver: keep the stored one current."""
        cs = self._conf_state
        snap = self.storage.snapshot_metadata()
        named = {*snap.conf_state.voters, *snap.conf_state.learners}
        members = {*cs.voters, *cs.learners, *cs.voters_outgoing, *cs.learners_next}
        return not members <= named and index > snap.index

    def _snapshot_header(self, cs: ConfState) -> bytes:
        """The members' addresses put before the state machine's bytes (`wrap_snapshot`)."""
        members = {*cs.voters, *cs.learners, *cs.voters_outgoing, *cs.learners_next}
        return snapshot_header({i: a for i, a in self.transport.addresses.items() if i in members})

    def _store_snapshot(self, made: MadeSnapshot) -> None:
        """Store the applier's snapshot (unless one as new arrived meanwhile), then compact."""
        t0 = time.monotonic()
        try:
            self._store_snapshot_now(made)
        finally:
            took = time.monotonic() - t0
            if took > self._slow_s:
                log.warning(
                    "raft node %d: storing snapshot %d took %.0f ms",
                    self.config.id,
                    made.index,
                    took * 1000,
                )

    def _store_snapshot_now(self, made: MadeSnapshot) -> None:
        s = self.storage
        try:
            if made.index > s.snapshot_metadata().index and made.index <= s.last_index():
                self._save_commit()  # the stored commit index must cover the snapshot's
                staged = made.take()
                if staged is not None and isinstance(s, SnapshotStaging):
                    s.store_staged(made.index, made.conf_state, staged)  # written ahead
                else:
                    s.create_snapshot(made.index, made.conf_state, made.pieces())
        finally:
            made.close()
        if self._conf_wait and s.snapshot_metadata().index >= self._conf_wait:
            self._conf_wait = 0
            self._shown_conf = self._conf_state
        compact_to = made.index - self.config.compact_keep
        if s.first_index() <= compact_to <= s.snapshot_metadata().index:
            s.compact(compact_to)

    def _restore_addresses(self, snap: Snapshot) -> bytes:
        """Learn the addresses of members we lack from a snapshot; returns the state
        machine's part of it."""
        addresses, data = unwrap_snapshot(snap.data)
        known = self.transport.addresses
        for node_id, address in addresses.items():
            if node_id != self.config.id and node_id not in known:
                self.transport.add_peer(node_id, address)
        return data

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

    def wait_stopped(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)


def _failed(err: BaseException) -> Future[Any]:
    fut: Future[Any] = Future()
    fut.set_exception(err)
    return fut


_fail = fail_future
