"""A deterministic, seeded chaos network for driving `RawNode`s (public test harness).

Theory of operation. Time advances in ticks (`tick()` / `run(n)`). Each tick every live node is
ticked, then messages are delivered in (delivery tick, send order) order until none is due;
messages produced by a delivery are scheduled too, so with zero delay a whole round trip fits
in one tick. Every `Ready` is handled like a correct driver would: persist to the node's
`MemoryStorage`, then send, then apply, then `advance`.

Faults, all drawn from one `random.Random(seed)` so a seed replays the same run exactly:
`Faults(drop, duplicate, min_delay, max_delay)` drops, duplicates and delays (hence reorders)
messages; `partition(*groups)` cuts links between groups (`heal()` restores them);
`crash(id)` loses everything but the node's storage (persisted entries, hard state, snapshot);
`restart(id)` rebuilds the node from that storage and re-applies committed entries.

Applied state: each node folds applied payloads into a SHA-256 chain (`digest`) so snapshots
are tiny and state-machine safety is one comparison: every node that has applied index `i`
has the same digest at `i`. The network records the run's history (`raft_safety`) and
`check_invariants()` raises `SafetyViolation` on: two leaders in one term (election safety),
a leader losing an entry of its own log (leader append-only), two different entries applied at
one index (state-machine safety), a leader lacking an entry committed in an earlier term
(leader completeness); `check_log_matching()` checks logs that agree on (index, term) but
differ before it. A crash happens between two Ready cycles: a Ready is handled atomically, so
"persisted but not sent" is the same as "sent and lost", which the fault model covers.
"""

from __future__ import annotations

import contextlib
import heapq
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gpu_platform.domain.consensus import (
    ConfChange,
    Config,
    ConfState,
    Entry,
    EntryType,
    MemoryStorage,
    Message,
    MessageType,
    ProposalDroppedError,
    Raft,
    RawNode,
    ReadOnlyOption,
    ReadState,
    Role,
    bootstrap,
)
from gpu_platform.domain.consensus.storage import NO_LIMIT
from gpu_platform.testing.raft_safety import GENESIS, SafetyHistory, SafetyViolation

__all__ = ["Faults", "NodeOptions", "RaftNetwork", "SafetyViolation", "SimNode"]


@dataclass(frozen=True, slots=True)
class Faults:
    """Message faults: probabilities in [0, 1], delays in ticks."""

    drop: float = 0.0
    duplicate: float = 0.0
    min_delay: int = 0
    max_delay: int = 0


NO_FAULTS = Faults()


@dataclass(frozen=True, slots=True)
class NodeOptions:
    election_tick: int = 10
    heartbeat_tick: int = 1
    lean_replication: bool = False
    pre_vote: bool = True
    check_quorum: bool = True
    max_size_per_msg: int = NO_LIMIT
    max_inflight_msgs: int = 256
    read_only_option: ReadOnlyOption = ReadOnlyOption.SAFE
    snapshot_every: int = 0  # applied entries between snapshots + compaction; 0 = never

    def config(self, node_id: int, applied: int = 0) -> Config:
        return Config(
            id=node_id,
            election_tick=self.election_tick,
            heartbeat_tick=self.heartbeat_tick,
            lean_replication=self.lean_replication,
            applied=applied,
            max_size_per_msg=self.max_size_per_msg,
            max_inflight_msgs=self.max_inflight_msgs,
            check_quorum=self.check_quorum,
            pre_vote=self.pre_vote,
            read_only_option=self.read_only_option,
        )


@dataclass(slots=True)
class SimNode:
    """A simulated server: durable storage plus volatile Raft node and applied state."""

    id: int
    storage: MemoryStorage
    rawnode: RawNode | None
    rng: random.Random
    applied: int = 0
    digest: bytes = GENESIS
    conf_state: ConfState = field(default_factory=ConfState)
    payloads: list[bytes] = field(default_factory=list)  # applied normal payloads (this life)
    read_states: list[ReadState] = field(default_factory=list)
    pending_reads: dict[bytes, int] = field(default_factory=dict)  # ctx -> min read index
    seen_commit: int = 0
    conf_dirty: bool = False  # a conf change was applied since the last snapshot

    @property
    def alive(self) -> bool:
        return self.rawnode is not None

    @property
    def node(self) -> RawNode:
        if self.rawnode is None:
            raise RuntimeError(f"node {self.id} is down")
        return self.rawnode


def _encode_state(applied: int, digest: bytes) -> bytes:
    return applied.to_bytes(8, "big") + digest


class RaftNetwork:
    """Nodes + a faulty network + history checks. Deterministic for a given seed."""

    def __init__(
        self,
        ids: Iterable[int],
        seed: int = 0,
        *,
        faults: Faults = NO_FAULTS,
        options: NodeOptions | None = None,
        check_every_step: bool = True,
    ) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.faults = faults
        self.options = options or NodeOptions()
        self.check_every_step = check_every_step
        self.now = 0
        self._seq = 0
        self._queue: list[tuple[int, int, Message, bool]] = []
        self._groups: dict[int, int] | None = None
        self.nodes: dict[int, SimNode] = {}
        self.history = SafetyHistory()
        # Aliases of the history, for tests that inspect it.
        self.committed_terms = self.history.committed_terms
        self.digests = self.history.digests
        self.entry_at = self.history.entry_at
        self.delivered = 0
        self.dropped = 0
        self.snapshots_delivered = 0
        self.snapshots_lost = 0
        voters = tuple(sorted(ids))
        for i in voters:
            storage = MemoryStorage()
            bootstrap(storage, voters)
            self._start(i, storage)

    # ------------------------------------------------------------------ lifecycle
    def _start(self, node_id: int, storage: MemoryStorage) -> SimNode:
        snap = storage.snapshot()
        rng = random.Random(self.seed * 1_000_003 + node_id * 7919 + self.now)
        applied, digest = snap.metadata.index, GENESIS
        if len(snap.data) == 40:
            applied, digest = int.from_bytes(snap.data[:8], "big"), snap.data[8:]
        # The applied state restarts from the snapshot (the log may still hold older entries
        # when snapshots are not followed by compaction): tell Raft where applying resumes.
        rawnode = RawNode(self.options.config(node_id, applied=applied), storage, rng)
        node = SimNode(node_id, storage, rawnode, rng, applied, digest, snap.metadata.conf_state)
        node.seen_commit = rawnode.raft.raft_log.committed
        self.nodes[node_id] = node
        return node

    def add_node(self, node_id: int) -> SimNode:
        """Start a new, empty server (it joins once a conf change adds it)."""
        if node_id in self.nodes:
            raise ValueError(f"node {node_id} exists")
        return self._start(node_id, MemoryStorage())

    def crash(self, node_id: int) -> None:
        """Lose all volatile state of `node_id`; its storage survives."""
        self.nodes[node_id].rawnode = None

    def restart(self, node_id: int) -> None:
        old = self.nodes[node_id]
        if old.alive:
            raise ValueError(f"node {node_id} is running")
        self._start(node_id, old.storage)

    def partition(self, *groups: Iterable[int]) -> None:
        """Only nodes in the same group can talk; nodes in no group are isolated."""
        self._groups = {}
        for g, members in enumerate(groups):
            for i in members:
                self._groups[i] = g

    def isolate(self, node_id: int) -> None:
        others = [i for i in self.nodes if i != node_id]
        self.partition([node_id], others)

    def heal(self) -> None:
        self._groups = None

    def connected(self, a: int, b: int) -> bool:
        if self._groups is None:
            return True
        ga, gb = self._groups.get(a), self._groups.get(b)
        return ga is not None and ga == gb

    # ------------------------------------------------------------------ client calls
    def live(self) -> list[SimNode]:
        return [n for _, n in sorted(self.nodes.items()) if n.alive]

    def leader(self) -> int | None:
        """The live leader of the highest term, if any."""
        best: tuple[int, int] | None = None
        for n in self.live():
            r = n.node.raft
            if r.state is Role.LEADER and (best is None or r.term > best[0]):
                best = (r.term, n.id)
        return None if best is None else best[1]

    def propose(self, data: bytes, via: int | None = None) -> bool:
        """Propose at `via` (default: the leader); False if dropped there."""
        target = via if via is not None else self.leader()
        if target is None or not self.nodes[target].alive:
            return False
        try:
            self.nodes[target].node.propose(data)
        except ProposalDroppedError:
            return False
        self._drain(target)
        return True

    def propose_many(self, payloads: list[bytes], via: int | None = None) -> bool:
        target = via if via is not None else self.leader()
        if target is None or not self.nodes[target].alive:
            return False
        try:
            self.nodes[target].node.propose_many(payloads)
        except ProposalDroppedError:
            return False
        self._drain(target)
        return True

    def propose_conf_change(self, cc: ConfChange, via: int | None = None) -> bool:
        target = via if via is not None else self.leader()
        if target is None:
            return False
        try:
            self.nodes[target].node.propose_conf_change(cc)
        except ProposalDroppedError:
            return False
        self._drain(target)
        return True

    def read(self, node_id: int, ctx: bytes) -> None:
        """Start a linearizable read at `node_id`. When its ReadState arrives, its index must
        be at least every index committed anywhere before now (checked for SAFE reads)."""
        n = self.nodes[node_id]
        n.pending_reads[ctx] = max(self.committed_terms, default=0)
        self.call(node_id, lambda rn: rn.read_index(ctx))

    def call(self, node_id: int, fn: Callable[[RawNode], object]) -> None:
        """Run `fn` on a live node's RawNode, then handle its Ready."""
        fn(self.nodes[node_id].node)
        self._drain(node_id)

    # ------------------------------------------------------------------ time
    def tick(self) -> None:
        for n in self.live():
            n.node.tick()
            self._drain(n.id)
        self.deliver_due()
        self.now += 1
        if self.check_every_step:
            self.check_invariants()

    def run(self, ticks: int) -> None:
        for _ in range(ticks):
            self.tick()

    def run_until(self, predicate: Callable[[], bool], max_ticks: int) -> int | None:
        """Tick until `predicate()`; the ticks it took, or None if it never held."""
        for t in range(max_ticks + 1):
            if predicate():
                return t
            self.tick()
        return None

    def deliver_due(self) -> None:
        q = self._queue
        while q and q[0][0] <= self.now:
            _, _, m, lost = heapq.heappop(q)
            self._deliver(m, lost)

    def _deliver(self, m: Message, lost: bool) -> None:
        dest = self.nodes.get(m.to)
        ok = not lost and dest is not None and dest.alive and self.connected(m.from_, m.to)
        if ok and dest is not None:
            self.delivered += 1
            # A forwarded proposal may reach a node that is no leader any more: dropped.
            with contextlib.suppress(ProposalDroppedError):
                dest.node.step(m)
            self._drain(dest.id)
        else:
            self.dropped += 1
        if m.type is MessageType.SNAP:
            if ok:
                self.snapshots_delivered += 1
            else:
                self.snapshots_lost += 1
            sender = self.nodes.get(m.from_)
            if sender is not None and sender.alive:
                sender.node.report_snapshot(m.to, ok)
                self._drain(sender.id)

    def _send(self, m: Message) -> None:
        f = self.faults
        if not self.connected(m.from_, m.to) or (f.drop and self.rng.random() < f.drop):
            self.dropped += 1
            if m.type is MessageType.SNAP:
                self._schedule(m, 0, lost=True)  # the transport reports the failure
            return
        copies = 2 if f.duplicate and self.rng.random() < f.duplicate else 1
        for _ in range(copies):
            delay = (
                f.min_delay
                if f.max_delay <= f.min_delay
                else self.rng.randint(f.min_delay, f.max_delay)
            )
            self._schedule(m, delay)

    def _schedule(self, m: Message, delay: int, lost: bool = False) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (self.now + delay, self._seq, m, lost))

    # ------------------------------------------------------------------ the driver loop
    def _drain(self, node_id: int) -> None:
        n = self.nodes[node_id]
        rn = n.rawnode
        if rn is None:
            return
        while rn.has_ready():
            rd = rn.ready()
            # 1. persist
            if rd.snapshot is not None:
                n.storage.apply_snapshot(rd.snapshot)
                self._install(n, rd.snapshot.data, rd.snapshot.metadata.index)
                n.conf_state = rd.snapshot.metadata.conf_state
            if rd.entries_to_persist:
                n.storage.append(rd.entries_to_persist)
            if rd.hard_state is not None:
                n.storage.set_hard_state(rd.hard_state)
            # 2. send
            for m in rd.messages:
                self._send(m)
            # 3. apply
            for e in rd.committed_entries:
                self._apply(n, rn, e)
            for rs in rd.read_states:
                self._check_read(n, rs)
            n.read_states.extend(rd.read_states)
            rn.advance(rd)
            n.seen_commit = self.history.record_commit(rn.raft, n.seen_commit)
            self._maybe_snapshot(n)

    def _check_read(self, n: SimNode, rs: ReadState) -> None:
        floor = n.pending_reads.pop(rs.request_ctx, None)
        safe = self.options.read_only_option is ReadOnlyOption.SAFE
        if safe and floor is not None and rs.index < floor:
            raise SafetyViolation(
                f"linearizability: read {rs.request_ctx!r} at node {n.id} got index {rs.index}"
                f" < {floor}, committed before the read began"
            )

    def _install(self, n: SimNode, data: bytes, index: int) -> None:
        applied, digest = int.from_bytes(data[:8], "big"), data[8:]
        if len(data) != 40:
            applied, digest = index, GENESIS
        self.history.record_install(n.id, applied, digest)
        n.applied, n.digest = applied, digest

    def _apply(self, n: SimNode, rn: RawNode, e: Entry) -> None:
        n.digest = self.history.record_apply(n.id, n.applied, n.digest, e)
        n.applied = e.index
        if e.type is EntryType.CONF_CHANGE:
            n.conf_state = rn.apply_conf_change(ConfChange.decode(e.data))
            n.conf_dirty = True
        elif e.data:
            n.payloads.append(e.data)

    def _maybe_snapshot(self, n: SimNode) -> None:
        """Snapshot every `snapshot_every` applied entries (and compact), and after every
        applied conf change (so a joining node's snapshot always names it)."""
        every = self.options.snapshot_every
        snap_index = n.storage.snapshot().metadata.index
        due = bool(every) and n.applied - snap_index >= every
        if not (due or n.conf_dirty) or n.applied <= snap_index:
            return
        if n.applied > n.storage.last_index():
            return
        n.storage.create_snapshot(n.applied, n.conf_state, _encode_state(n.applied, n.digest))
        n.conf_dirty = False
        if every:
            n.storage.compact(n.applied)

    # ------------------------------------------------------------------ safety checks
    def _rafts(self) -> list[Raft]:
        return [n.node.raft for n in self.live()]

    def check_invariants(self) -> None:
        """Every safety property of Raft's Figure 3 that can be judged at this instant."""
        for r in self._rafts():
            r.check_invariants()
        self.check_election_safety()
        self.check_leader_append_only()
        self.check_leader_completeness()
        self.check_state_machine_safety()

    def check_election_safety(self) -> None:
        """At most one leader can be elected in a given term (over the whole history)."""
        self.history.check_election_safety(self._rafts())

    def check_leader_append_only(self) -> None:
        """A leader never overwrites or deletes entries in its log; it only appends."""
        self.history.check_leader_append_only(self._rafts())

    def check_leader_completeness(self) -> None:
        """A leader's log holds every entry committed in earlier terms."""
        self.history.check_leader_completeness(self._rafts())

    def check_state_machine_safety(self) -> None:
        """No two nodes have applied different entries at one index."""
        self.history.check_state_machine_safety((n.id, n.applied, n.digest) for n in self.live())

    def check_log_matching(self) -> None:
        """If two logs hold an entry with the same index and term, they agree up to it."""
        self.history.check_log_matching(self._rafts())

    # ------------------------------------------------------------------ views
    def committed_payloads(self, node_id: int) -> list[bytes]:
        return list(self.nodes[node_id].payloads)

    def terms(self) -> dict[int, int]:
        return {n.id: n.node.raft.term for n in self.live()}

    def roles(self) -> dict[int, Role]:
        return {n.id: n.node.raft.state for n in self.live()}

    def commit_index(self, node_id: int) -> int:
        return self.nodes[node_id].node.raft.raft_log.committed

    def has_leader_for(self, node_ids: Iterable[int]) -> bool:
        lead = self.leader()
        return lead is not None and all(
            self.nodes[i].node.raft.lead == lead for i in node_ids if self.nodes[i].alive
        )
