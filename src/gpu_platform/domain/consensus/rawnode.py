"""`RawNode`: the driver-facing, sans-I/O interface of a Raft peer (etcd-raft's RawNode).

Theory of operation. The driver feeds inputs — `tick()` every time unit, `step(msg)` for each
message from a peer, `propose(data)` / `propose_conf_change(cc)` / `read_index(ctx)` /
`transfer_leader(id)` for client requests — and, whenever `has_ready()`, takes one `Ready` and
must, in this order:

1. persist `snapshot`, `entries_to_persist` and `hard_state` (fsync when `must_sync`);
2. send `messages` (only now: a vote or an acknowledgement must never outrun the disk);
3. apply `committed_entries` to the state machine (conf changes through
   `apply_conf_change`), and serve `read_states` once applied reaches their index;
4. call `advance(ready)`.

Nothing is sent, stored or timed here; the same inputs always give the same outputs (all
randomness comes from the `random.Random` passed in).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from gpu_platform.domain.consensus.errors import StepError
from gpu_platform.domain.consensus.raft import Config, Raft
from gpu_platform.domain.consensus.storage import MemoryStorage, Storage
from gpu_platform.domain.consensus.tracker import ProgressState
from gpu_platform.domain.consensus.types import (
    LOCAL_TYPES,
    RESPONSE_TYPES,
    ConfChange,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Message,
    MessageType,
    ReadState,
    Role,
    Snapshot,
    SnapshotMetadata,
    SoftState,
)

__all__ = ["ProgressStatus", "RawNode", "Ready", "Status", "bootstrap"]

MT = MessageType


@dataclass(frozen=True, slots=True)
class Ready:
    """Everything the driver must do, in order: persist, send, apply, then `advance`.

    `soft_state` / `hard_state` are None when unchanged since the previous Ready; `snapshot`
    is None when there is none to install.
    """

    soft_state: SoftState | None = None
    hard_state: HardState | None = None
    entries_to_persist: tuple[Entry, ...] = ()
    snapshot: Snapshot | None = None
    committed_entries: tuple[Entry, ...] = ()
    messages: tuple[Message, ...] = ()
    read_states: tuple[ReadState, ...] = ()
    must_sync: bool = False


@dataclass(frozen=True, slots=True)
class ProgressStatus:
    """A copy of the leader's view of one peer (indexes are log indexes)."""

    match: int
    next: int
    state: ProgressState
    recent_active: bool
    is_learner: bool


@dataclass(frozen=True, slots=True)
class Status:
    """A snapshot of a node's state for operators and tests; `progress` only on a leader."""

    id: int
    hard_state: HardState
    soft_state: SoftState
    applied: int
    lead_transferee: int
    conf_state: ConfState
    progress: dict[int, ProgressStatus] = field(default_factory=dict)  # leader only


def bootstrap(
    storage: MemoryStorage, voters: tuple[int, ...], learners: tuple[int, ...] = ()
) -> None:
    """Initialise an empty storage for a brand-new cluster of `voters` (and `learners`).

    The initial configuration is written as a snapshot at index 1, term 1 with empty
    application data, so every node starts from the same state and a node that joins later
    (with empty storage) catches up through InstallSnapshot.
    """
    cs = ConfState(voters=tuple(sorted(voters)), learners=tuple(sorted(learners)))
    storage.apply_snapshot(Snapshot(b"", SnapshotMetadata(cs, index=1, term=1)))
    storage.set_hard_state(HardState(term=1, commit=1))


class RawNode:
    """A Raft peer driven by its caller: inputs in, `Ready` out."""

    def __init__(self, config: Config, storage: Storage, rng: random.Random) -> None:
        self.raft = Raft(config, storage, rng)
        self._prev_soft = self.raft.soft_state()
        self._prev_hard = self.raft.hard_state()
        self._pending: Ready | None = None

    # --- inputs
    def tick(self) -> None:
        """One unit of logical time (election_tick / heartbeat_tick are counted in these)."""
        self.raft.tick()

    def tick_ends_period(self) -> bool:
        """Would the next `tick` start an election here (never on a leader)?"""
        return self.raft.tick_ends_period()

    def campaign(self) -> None:
        """Start an election now (pre-vote first if enabled)."""
        self.raft.step(Message(MT.HUP, from_=self.raft.id))

    def propose(self, data: bytes) -> None:
        """Propose `data`; raises ProposalDroppedError when no leader can take it."""
        self.propose_many([data])

    def propose_many(self, payloads: list[bytes]) -> None:
        """Propose several payloads as one batch (one message, one append)."""
        ents = tuple(Entry(0, 0, EntryType.NORMAL, d) for d in payloads)
        self.raft.step(Message(MT.PROP, from_=self.raft.id, entries=ents))

    def propose_conf_change(self, cc: ConfChange) -> None:
        ent = Entry(0, 0, EntryType.CONF_CHANGE, cc.encode())
        self.raft.step(Message(MT.PROP, from_=self.raft.id, entries=(ent,)))

    def apply_conf_change(self, cc: ConfChange) -> ConfState:
        """Apply a *committed* conf change (from `committed_entries`); the new configuration."""
        return self.raft.apply_conf_change(cc)

    def step(self, m: Message) -> None:
        """Step a message received from a peer."""
        if m.type in LOCAL_TYPES:
            raise StepError(f"cannot step raft local message {m.type.value}")
        if m.type in RESPONSE_TYPES and m.from_ not in self.raft.prs.progress:
            return  # a response from a peer we no longer know: ignore
        self.raft.step(m)

    def transfer_leader(self, transferee: int) -> None:
        """Ask the leader to hand leadership to `transferee` (forwarded by followers)."""
        self.raft.step(Message(MT.TRANSFER_LEADER, from_=transferee))

    def read_index(self, ctx: bytes) -> None:
        """Ask for a linearizable read; answered by a `ReadState` with the same ctx."""
        self.raft.step(Message(MT.READ_INDEX, from_=self.raft.id, context=ctx))

    def report_unreachable(self, node: int) -> None:
        """The transport could not reach `node`: stop streaming to it, probe instead."""
        self.raft.step(Message(MT.UNREACHABLE, from_=node))

    def report_snapshot(self, node: int, ok: bool) -> None:
        """The transport delivered (or lost) the snapshot sent to `node`."""
        self.raft.step(Message(MT.SNAP_STATUS, from_=node, reject=not ok))

    # --- outputs
    def has_ready(self) -> bool:
        r = self.raft
        log = r.raft_log
        if r.soft_state() != self._prev_soft:
            return True
        hs = r.hard_state()
        if not hs.is_empty() and hs != self._prev_hard:
            return True
        return bool(
            log.has_pending_snapshot()
            or r.msgs
            or log.unstable.entries
            or log.has_next_ents()
            or r.read_states
        )

    def ready(self) -> Ready:
        """The next batch of work; call `advance(ready)` once it is done.

        Raises StepError if the previous Ready was not advanced yet (a driver bug).
        """
        if self._pending is not None:
            raise StepError("ready() called before advance() of the previous Ready")
        r = self.raft
        log = r.raft_log
        soft, hard = r.soft_state(), r.hard_state()
        entries = tuple(log.unstable.entries)
        rd = Ready(
            soft_state=soft if soft != self._prev_soft else None,
            hard_state=hard if hard != self._prev_hard and not hard.is_empty() else None,
            entries_to_persist=entries,
            snapshot=log.unstable.snapshot,
            committed_entries=tuple(log.next_ents()),
            messages=tuple(r.msgs),
            read_states=tuple(r.read_states),
            must_sync=bool(entries)
            or hard.term != self._prev_hard.term
            or hard.vote != self._prev_hard.vote,
        )
        r.msgs = []
        r.read_states = []
        self._prev_soft = soft
        self._prev_hard = hard
        self._pending = rd
        return rd

    def advance(self, rd: Ready) -> None:
        """The driver persisted, sent and applied `rd` (the last Ready handed out)."""
        if rd is not self._pending:
            raise StepError("advance() of a Ready that is not the pending one")
        log = self.raft.raft_log
        if rd.snapshot is not None:
            log.stable_snap_to(rd.snapshot.metadata.index)
            log.applied = max(log.applied, rd.snapshot.metadata.index)
        if rd.entries_to_persist:
            last = rd.entries_to_persist[-1]
            log.stable_to(last.index, last.term)
        if rd.committed_entries:
            self.raft.advance_applied(rd.committed_entries[-1].index)
        self._pending = None

    def status(self) -> Status:
        r = self.raft
        progress: dict[int, ProgressStatus] = {}
        if r.state is Role.LEADER:
            progress = {
                i: ProgressStatus(pr.match, pr.next, pr.state, pr.recent_active, pr.is_learner)
                for i, pr in r.prs.visit()
            }
        return Status(
            id=r.id,
            hard_state=r.hard_state(),
            soft_state=r.soft_state(),
            applied=r.raft_log.applied,
            lead_transferee=r.lead_transferee,
            conf_state=r.prs.conf_state(),
            progress=progress,
        )
