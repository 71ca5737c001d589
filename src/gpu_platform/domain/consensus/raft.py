"""The Raft state machine: roles, terms, elections, snapshots restore and membership.

Theory of operation. `Raft` is pure: `step(message)` and `tick()` mutate it and append outgoing
messages to `msgs`; nothing here does I/O or reads a clock (time is `tick()` calls). The
driver-facing wrapper is `RawNode` (`rawnode.py`); message handling per role is in
`leader.py` and `follower.py` (follower and candidates).

Roles change only along `ROLE_TRANSITIONS` (an illegal change raises `IllegalTransition`):

    follower ──election timeout──> pre-candidate ──pre-vote quorum──> candidate ──votes──> leader
        ^                                │                               │                   │
        └──── higher term / lost vote / heard from a leader ─────────────┴───────────────────┘

* Randomized election timeout in [election_tick, 2*election_tick), drawn from the seeded
  `random.Random` given in the constructor; reset on every role change.
* Pre-vote (§9.6 of the thesis): a pre-candidate asks "would you vote for me at term+1?"
  without bumping its term, so a partitioned node rejoining cannot disrupt a healthy leader.
* Check-quorum: a leader that has not heard from a quorum in an election timeout steps down;
  followers that heard from a leader within the timeout ignore vote requests (leader lease).
* Votes are granted at most once per term, only to candidates whose log is at least as
  up-to-date (§5.4.1). Terms only grow; a message of a higher term turns us into a follower.
* Leader transfer: the leader brings the transferee up to date, then sends it TIMEOUT_NOW,
  which makes it campaign at once (bypassing pre-vote and leases).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from gpu_platform.domain.consensus import configs, elections, follower, leader
from gpu_platform.domain.consensus.confchange import restore
from gpu_platform.domain.consensus.errors import (
    CompactedError,
    LogInvariantError,
)
from gpu_platform.domain.consensus.log import RaftLog
from gpu_platform.domain.consensus.quorum import VoteResult
from gpu_platform.domain.consensus.readonly import ReadOnly
from gpu_platform.domain.consensus.storage import NO_LIMIT, Storage
from gpu_platform.domain.consensus.tracker import Progress, ProgressTracker, TrackerConfig
from gpu_platform.domain.consensus.types import (
    NONE,
    CampaignType,
    ConfChange,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Message,
    MessageType,
    ReadOnlyOption,
    ReadState,
    Role,
    Snapshot,
    SoftState,
)
from gpu_platform.domain.errors import IllegalTransition, InvalidRequest

__all__ = ["CAMPAIGN_TRANSFER", "ROLE_TRANSITIONS", "CampaignType", "Config", "Raft"]

CAMPAIGN_TRANSFER = b"CampaignTransfer"
"""Vote-request context marking a campaign forced by leader transfer (ignores leases)."""

MT = MessageType
_F, _PC, _C, _L = Role.FOLLOWER, Role.PRE_CANDIDATE, Role.CANDIDATE, Role.LEADER

ROLE_TRANSITIONS: dict[tuple[Role, Role], str] = {
    (_F, _F): "saw a higher term or a leader",
    (_F, _PC): "election timeout with pre-vote",
    (_F, _C): "election timeout without pre-vote, or TIMEOUT_NOW",
    (_PC, _F): "pre-vote lost, or heard from a leader",
    (_PC, _PC): "election timeout again while pre-campaigning",
    (_PC, _C): "won the pre-vote",
    (_C, _F): "vote lost, higher term, or heard from the leader of this term",
    (_C, _PC): "election timeout with pre-vote",
    (_C, _C): "election timeout without pre-vote: a new term",
    (_C, _L): "won the vote",
    (_L, _F): "saw a higher term, lost check-quorum, or was removed",
}
"""Every legal (from, to) role change, with why it happens; other pairs raise."""


@dataclass(frozen=True, slots=True)
class Config:
    """Parameters of one node. Ticks are the only unit of time."""

    id: int
    election_tick: int = 10
    heartbeat_tick: int = 1
    applied: int = 0
    max_size_per_msg: int = NO_LIMIT  # bytes per append; 0 = one entry per message
    max_inflight_msgs: int = 256
    max_committed_size_per_ready: int = NO_LIMIT
    check_quorum: bool = False
    pre_vote: bool = False
    read_only_option: ReadOnlyOption = ReadOnlyOption.SAFE
    disable_proposal_forwarding: bool = False
    # Fewer messages per commit (issue 21): a commit is not broadcast as empty appends, its
    # index travels with the next append or heartbeat; and a periodic heartbeat round skips a
    # peer streaming appends (REPLICATE, room in flight) that got one since the last round
    # and already knows the commit index (an append resets its election timer, and its
    # answer marks it active for check-quorum, as a heartbeat's does). Off: etcd's behaviour.
    lean_replication: bool = False

    def validate(self) -> None:
        if self.id == NONE:
            raise InvalidRequest("id", "cannot use none as id")
        if self.heartbeat_tick <= 0:
            raise InvalidRequest("heartbeat_tick", "must be greater than 0")
        if self.election_tick <= self.heartbeat_tick:
            raise InvalidRequest("election_tick", "must be greater than heartbeat_tick")
        if self.max_inflight_msgs <= 0:
            raise InvalidRequest("max_inflight_msgs", "must be greater than 0")
        if self.read_only_option is ReadOnlyOption.LEASE_BASED and not self.check_quorum:
            raise InvalidRequest("read_only_option", "lease-based reads need check_quorum")


class Raft:
    """One Raft peer. Mutated only by `step`, `tick` and the driver hooks used by RawNode."""

    def __init__(self, config: Config, storage: Storage, rng: random.Random) -> None:
        config.validate()
        self.id = config.id
        self.rng = rng
        self.raft_log = RaftLog(storage, config.max_committed_size_per_ready)
        self.max_msg_size = config.max_size_per_msg
        self.prs = ProgressTracker(config.max_inflight_msgs)
        self.election_timeout = config.election_tick
        self.heartbeat_timeout = config.heartbeat_tick
        self.check_quorum = config.check_quorum
        self.lean_replication = config.lean_replication
        self.pre_vote = config.pre_vote
        self.read_only_option = config.read_only_option
        self.disable_proposal_forwarding = config.disable_proposal_forwarding
        self.term = 0
        self.vote = NONE
        self.lead = NONE
        self.state = Role.FOLLOWER
        self.is_learner = False
        self.msgs: list[Message] = []
        self.read_states: list[ReadState] = []
        self.pending_read_index: list[Message] = []
        self.lead_transferee = NONE
        self.pending_conf_index = 0
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_election_timeout = self.election_timeout
        self.read_only = ReadOnly()

        hs, cs = storage.initial_state()
        cfg, prs = restore(cs, self.raft_log.last_index(), self.prs.max_inflight)
        self.switch_to_config(cfg, prs)
        if not hs.is_empty():
            self._load_state(hs)
        if config.applied > 0:
            self.raft_log.applied_to(config.applied)
        self.become_follower(self.term, NONE)

    # ------------------------------------------------------------------ state views
    def soft_state(self) -> SoftState:
        return SoftState(self.lead, self.state)

    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.raft_log.committed)

    def promotable(self) -> bool:
        """Can this node campaign? (a voter of the current config without pending snapshot)"""
        pr = self.prs.progress.get(self.id)
        return pr is not None and not pr.is_learner and not self.raft_log.has_pending_snapshot()

    def _load_state(self, hs: HardState) -> None:
        if hs.commit < self.raft_log.committed or hs.commit > self.raft_log.last_index():
            raise LogInvariantError(
                f"{self.id} state.commit {hs.commit} is out of range "
                f"[{self.raft_log.committed}, {self.raft_log.last_index()}]"
            )
        self.raft_log.committed = hs.commit
        self.term = hs.term
        self.vote = hs.vote

    # ------------------------------------------------------------------ messages out
    def send(self, m: Message) -> None:
        """Queue `m` (the driver sends it after persisting the same Ready)."""
        self.msgs.append(m)

    def msg(self, mtype: MessageType, to: int, **fields: object) -> Message:
        """A message from us at our current term (fields override)."""
        fields.setdefault("term", self.term)
        return Message(mtype, to, self.id, **fields)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ role changes
    def _set_role(self, to: Role) -> None:
        if (self.state, to) not in ROLE_TRANSITIONS:
            raise IllegalTransition("raft role", self.state, to)
        self.state = to

    def reset(self, term: int) -> None:
        if self.term != term:
            self.term = term
            self.vote = NONE
        self.lead = NONE
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_election_timeout = self.election_timeout + self.rng.randrange(
            self.election_timeout
        )
        self.lead_transferee = NONE
        self.prs.reset_votes()
        last = self.raft_log.last_index()
        size = self.prs.max_inflight
        for i, pr in list(self.prs.progress.items()):
            new = Progress(last + 1, size, is_learner=pr.is_learner)
            # Until a peer answers, we do not know it is alive (check-quorum, snapshots).
            new.recent_active = i == self.id
            if i == self.id:
                new.match = last
            self.prs.progress[i] = new
        self.pending_conf_index = 0
        self.read_only = ReadOnly()
        self.pending_read_index = []

    def become_follower(self, term: int, lead: int) -> None:
        self.reset(term)
        self.lead = lead
        self._set_role(_F)

    def become_pre_candidate(self) -> None:
        self._set_role(_PC)
        # No term bump and no vote: a pre-vote changes no persistent state.
        self.prs.reset_votes()
        self.lead = NONE

    def become_candidate(self) -> None:
        self._set_role(_C)
        self.reset(self.term + 1)
        self.vote = self.id

    def become_leader(self) -> None:
        self._set_role(_L)
        self.reset(self.term)
        self.lead = self.id
        self.prs.progress[self.id].become_replicate()
        # Conservatively, any entry we have may be a conf change not yet applied.
        self.pending_conf_index = self.raft_log.last_index()
        # An empty entry of our term: committing it commits everything before (§5.4.2).
        leader.append_entry(self, [Entry(0, 0)])

    # ------------------------------------------------------------------ time
    def tick(self) -> None:
        if self.state is _L:
            self._tick_heartbeat()
        else:
            self._tick_election()

    def tick_ends_period(self) -> bool:
        """Would the next tick start an election here (a follower or candidate whose
        randomized election timeout runs out)? Always False on a leader."""
        if self.state is _L:
            return False
        return self.promotable() and self.election_elapsed + 1 >= self.randomized_election_timeout

    def _tick_election(self) -> None:
        self.election_elapsed += 1
        if self.promotable() and self.election_elapsed >= self.randomized_election_timeout:
            self.election_elapsed = 0
            self.step(Message(MT.HUP, from_=self.id))
        elif self.state is not _F and self.election_elapsed % self.heartbeat_timeout == 0:
            elections.ask_again(self)

    def _tick_heartbeat(self) -> None:
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.election_elapsed >= self.election_timeout:
            self.election_elapsed = 0
            if self.check_quorum:
                self.step(Message(MT.CHECK_QUORUM, from_=self.id))
            if self.state is _L and self.lead_transferee != NONE:
                self.lead_transferee = NONE  # the transfer did not finish in time
        if self.state is not _L:
            return
        if self.heartbeat_elapsed >= self.heartbeat_timeout:
            self.heartbeat_elapsed = 0
            self.step(Message(MT.BEAT, from_=self.id))

    # ------------------------------------------------------------------ elections
    def hup(self, t: CampaignType) -> None:
        if self.state is _L or not self.promotable():
            return
        log = self.raft_log
        if log.committed > log.applied:
            try:
                pending = log.slice(log.applied + 1, log.committed + 1)
            except CompactedError:
                pending = []
            if any(e.type is EntryType.CONF_CHANGE for e in pending):
                return  # a committed conf change must be applied before campaigning
        self.campaign(t)

    def campaign(self, t: CampaignType) -> None:
        if not self.promotable():
            return
        if t is CampaignType.PRE_ELECTION:
            self.become_pre_candidate()
            vote_msg, term = MT.PRE_VOTE, self.term + 1
        else:
            self.become_candidate()
            vote_msg, term = MT.VOTE, self.term
        if self.poll(self.id, True) is VoteResult.WON:
            if t is CampaignType.PRE_ELECTION:
                self.campaign(CampaignType.ELECTION)
            else:
                self.become_leader()
            return
        ctx = CAMPAIGN_TRANSFER if t is CampaignType.TRANSFER else b""
        last, last_term = self.raft_log.last_index(), self.raft_log.last_term()
        for vid in self.prs.voter_nodes():
            if vid == self.id:
                continue
            self.send(Message(vote_msg, vid, self.id, term, last_term, last, context=ctx))

    def poll(self, node: int, granted: bool) -> VoteResult:
        """Record `node`'s vote; the election's result so far."""
        self.prs.record_vote(node, granted)
        return self.prs.tally_votes()[2]

    # ------------------------------------------------------------------ step
    def step(self, m: Message) -> None:
        """Process one message (local or from a peer)."""
        if m.term == 0:
            pass  # local message
        elif m.term > self.term:
            if m.type in (MT.VOTE, MT.PRE_VOTE):
                force = m.context == CAMPAIGN_TRANSFER
                in_lease = (
                    self.check_quorum
                    and self.lead != NONE
                    and self.election_elapsed < self.election_timeout
                )
                if not force and in_lease:
                    return  # we heard from a leader recently: ignore the disruptor
            if m.type is MT.PRE_VOTE:
                pass  # never change our term in response to a pre-vote
            elif m.type is MT.PRE_VOTE_RESP and not m.reject:
                pass  # the term is bumped when the pre-vote is won
            elif m.type in (MT.APP, MT.HEARTBEAT, MT.SNAP):
                self.become_follower(m.term, m.from_)
            else:
                self.become_follower(m.term, NONE)
        elif m.term < self.term:
            if (self.check_quorum or self.pre_vote) and m.type in (MT.HEARTBEAT, MT.APP):
                # A stale leader (e.g. after a partition) learns the new term from this.
                self.send(self.msg(MT.APP_RESP, m.from_))
            elif m.type is MT.PRE_VOTE:
                self.send(self.msg(MT.PRE_VOTE_RESP, m.from_, reject=True))
            return

        if m.type is MT.HUP:
            self.hup(CampaignType.PRE_ELECTION if self.pre_vote else CampaignType.ELECTION)
        elif m.type in (MT.VOTE, MT.PRE_VOTE):
            self._handle_vote_request(m)
        elif self.state is _L:
            leader.step_leader(self, m)
        elif self.state is _F:
            follower.step_follower(self, m)
        else:
            follower.step_candidate(self, m)

    def _handle_vote_request(self, m: Message) -> None:
        can_vote = (
            self.vote == m.from_
            or (self.vote == NONE and self.lead == NONE)
            or (m.type is MT.PRE_VOTE and m.term > self.term)
        )
        resp = MT.VOTE_RESP if m.type is MT.VOTE else MT.PRE_VOTE_RESP
        if (
            can_vote
            and self.raft_log.is_up_to_date(m.index, m.log_term)
            and not elections.outranks(self, m)
        ):
            # The response carries the request's term so a pre-candidate can count it.
            self.send(Message(resp, m.from_, self.id, m.term))
            if m.type is MT.VOTE:
                self.election_elapsed = 0
                self.vote = m.from_
            elif self.state is not _L:
                # A granted pre-vote also restarts our election clock (etcd's does not): the
                # peer we backed gets a whole timeout to win before we split the vote with
                # it. We no longer count on the old leader (its lease would make us ignore
                # the real vote that follows).
                self.election_elapsed = 0
                self.lead = NONE
        else:
            self.send(Message(resp, m.from_, self.id, self.term, reject=True))
            if elections.outranks(self, m):  # ask again for ours: it may have been lost or ignored
                log = self.raft_log
                last, last_term = log.last_index(), log.last_term()
                self.send(Message(MT.PRE_VOTE, m.from_, self.id, m.term, last_term, last))

    # ------------------------------------------------------------------ membership (configs.py)
    def restore(self, s: Snapshot) -> bool:
        """Install snapshot `s`; False if it is stale or not needed."""
        return configs.restore_snapshot(self, s)

    def apply_conf_change(self, cc: ConfChange) -> ConfState:
        """Apply a committed configuration change; the resulting configuration."""
        return configs.apply_conf_change(self, cc)

    def switch_to_config(self, cfg: TrackerConfig, prs: dict[int, Progress]) -> ConfState:
        return configs.switch_to_config(self, cfg, prs)

    def advance_applied(self, applied: int) -> None:
        """The application applied everything up to `applied` (called by RawNode.advance)."""
        configs.advance_applied(self, applied)

    def check_invariants(self) -> None:
        self.raft_log.check_invariants()
        self.prs.check_invariants()
        assert self.state is not _L or self.lead == self.id, "a leader must lead itself"
        assert self.state is not _C or self.vote == self.id, "a candidate votes for itself"
