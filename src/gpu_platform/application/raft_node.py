"""`RaftNode`: the Raft driver — a `RawNode` wired to durable storage, a transport and a
replicated state machine, driven under one lock.

Theory of operation. Everything that touches the `RawNode` runs under one lock, the *loop
lock*, normally on one thread, the *Raft loop*. Other threads talk to it through an inbox
(`raft_inbox`): messages from the transport, client proposals and reads, transport reports,
stop. A transport whose receiving threads may block (TCP) has them do the loop's work
themselves when the lock is free, so a received message reaches the core without a thread
hand-off; everything else is queued for the loop's thread. The loop takes whatever is
queued — proposals from every caller go into one `ProposalBatch` appended with a single
`propose_many` (group commit: one append, one storage write, one fsync per batch, see
`raft_proposals`) — ticks the `RawNode` every `tick_interval` seconds, and handles each
`Ready` in the order Raft's safety needs:

0. **send early (leader only)** — a leader's AppendEntries and heartbeats go out *before* its
   own write, so the followers' fsyncs overlap the leader's (Raft thesis §10.2.1; etcd does
   the same). This cannot commit anything the leader has not made durable: acknowledgements
   are handled under the same loop lock, after step 1 returns, so the quorum that commits an
   entry always includes the leader's durable copy. Only when the Ready changes neither term
   nor vote; everything else waits for step 2. A Ready that writes no entry (a commit move)
   sends nothing early: it hands over (step 3) before it sends, so the client's answer does
   not wait for the commit news to the followers;
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
   changes are applied to the `RawNode` and the transport here, at once. A sole voter's
   proposer that calls `drive()` runs steps 1-3 on its own thread when the loop lock is
   free, and applies there when the applier is idle (`Applier.help`): its answer crosses no
   thread;
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

Errors: `raft_errors` (re-exported here). The driver's methods are split by concern: this
module keeps construction, lifecycle and the client API; the loop is `raft_loop`, the handling
of a `Ready` `raft_ready`, storing snapshots `raft_snapshots`: mixins stacked as
`RaftNode(RaftLoop(ReadyHandling(SnapshotKeeping)))`, each calling only what is below it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from gpu_platform.application.raft_applier import Applier, ChunkedStateMachine, StateMachine
from gpu_platform.application.raft_contact import QuorumContact
from gpu_platform.application.raft_errors import (
    InvalidMembershipChange,
    MembershipChangeInProgress,
    NodeStopped,
    NotLeader,
    RaftNodeError,
)
from gpu_platform.application.raft_heartbeat import HeartbeatKeeper
from gpu_platform.application.raft_inbox import Inbox
from gpu_platform.application.raft_loop import RaftLoop, _Item
from gpu_platform.application.raft_membership import add_voter_change, remove_voter_change
from gpu_platform.application.raft_node_types import RaftNodeConfig, RaftNodeStatus
from gpu_platform.application.raft_proposals import PendingProposals, ProposalBatch
from gpu_platform.application.raft_stalls import StallWatch
from gpu_platform.domain.consensus import (
    NONE,
    ConfChange,
    Config,
    ConfState,
    HardState,
    Message,
    RawNode,
    ReadOnlyOption,
    Role,
    Snapshot,
    SnapshotMetadata,
)
from gpu_platform.ports.outbound.metrics import NoRaftMetrics, RaftMetrics
from gpu_platform.ports.outbound.raft import RaftStorage, RaftTransport, SnapshotStaging
from gpu_platform.ports.outbound.thread_priority import NoThreadPriority, ThreadPriority

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


class RaftNode(RaftLoop):
    """A Raft peer: see the module docstring. Thread-safe public methods."""

    def __init__(
        self,
        config: RaftNodeConfig,
        storage: RaftStorage,
        transport: RaftTransport,
        state_machine: StateMachine,
        metrics: RaftMetrics | None = None,
        priority: ThreadPriority | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics or NoRaftMetrics()
        # The Raft loop, the keeper and the transport's receiving threads raise themselves.
        self.priority = priority or NoThreadPriority()
        self._lead = NONE
        self.storage = storage
        self.transport = transport
        self.state_machine = state_machine
        self._inbox: Inbox[_Item] = Inbox()
        self._crashed: BaseException | None = None
        self._next_tick = time.monotonic() + config.tick_interval  # set again by start()
        self._batch = ProposalBatch()  # proposals taken this drain, not yet appended
        self._proposals = PendingProposals()  # appended, awaiting apply
        self._reads: dict[bytes, Future[int]] = {}  # ReadIndex asked, not yet confirmed
        self._read_seq = 0
        self._thread: threading.Thread | None = None
        self._delivering: set[int] = set()  # the transport threads seen delivering messages
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
        self._contact = QuorumContact(config.id)  # renewals of the agents' leases (raft_contact)
        self._keeper = HeartbeatKeeper(
            config.id, transport, config.tick_interval, cover_s, priority=self.priority
        )
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
            lean_replication=c.lean_replication,
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
        # A transport whose receiving threads may block has them run the loop's work
        # (`raft_inbox`); any other (an asyncio thread) only queues.
        inline = getattr(self.transport, "inline_delivery", False) is True
        self._next_tick = time.monotonic() + self.config.tick_interval
        self.transport.start(
            self._raising(self._deliver if inline else lambda m: self._inbox.put(("msg", m, None))),
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

    def _raising(self, deliver: Callable[[Message], None]) -> Callable[[Message], None]:
        """`deliver`, called on the transport's threads: a thread that delivers a message for
        the first time is one the leader's heartbeats and the votes pass through, so its
        priority is raised then (`priority`)."""
        seen = self._delivering
        contact = self._contact

        def delivered(m: Message) -> None:
            tid = threading.get_ident()
            if tid not in seen:
                seen.add(tid)
                self.priority.raise_current(f"raft-net-{self.config.id}")
            contact.heard(m)  # stamped on arrival, before any queue
            deliver(m)

        return delivered

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
    def propose(self, data: bytes, *, driven: bool = False) -> Future[object]:
        """Replicate `data`; the future gets `StateMachine.apply`'s result on this node.
        `driven`: the caller calls `drive()` next, so the loop's thread is not woken for it.

        Fails with `NotLeader` (not the leader, or lost leadership before the entry was
        applied) or `NodeStopped`.
        """
        fut: Future[object] = Future()
        if not self._running:
            fut.set_exception(NodeStopped())
        elif driven:
            self._inbox.queue(("propose", data, fut))
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

    def heard_quorum_within(self, window_s: float) -> bool:
        """This node leads, and a quorum of voters (itself one) sent it a message of its
        term within the last `window_s` seconds: no newer leader took the lead more than
        `window_s` (plus a message's flight) ago (`raft_contact`). Never blocks."""
        s = self._status
        return s.role is Role.LEADER and self._contact.fresh(s.term, s.voters, window_s)

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

    def wait_stopped(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)


def _failed(err: BaseException) -> Future[Any]:
    fut: Future[Any] = Future()
    fut.set_exception(err)
    return fut
