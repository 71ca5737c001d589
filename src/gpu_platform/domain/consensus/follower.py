"""The follower and candidate sides of Raft: stepping messages, AppendEntries, snapshots.

Theory of operation. A follower accepts the leader of its term (`lead`), resets its election
clock on every message from it, forwards proposals, leader-transfer and read-index requests to
it, and answers appends: the consistency check and truncation on conflict are in
`RaftLog.maybe_append`; a rejection carries a hint (`reject_hint`, `log_term`) computed by
`RaftLog.find_conflict_by_term` so that the leader can skip a whole divergent term per round
trip. A (pre-)candidate counts votes of its own kind and becomes follower on hearing from a
leader of its term. A snapshot is installed only if it is newer than the commit index, names
this node, and is not already covered by the log (then the commit index just moves forward).

These are functions over `Raft` (not methods), like `leader.py`, one concept per module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_platform.domain.consensus import leader
from gpu_platform.domain.consensus.errors import CompactedError, ProposalDroppedError
from gpu_platform.domain.consensus.quorum import VoteResult
from gpu_platform.domain.consensus.types import (
    NONE,
    CampaignType,
    Message,
    MessageType,
    ReadState,
    Role,
)

if TYPE_CHECKING:
    from gpu_platform.domain.consensus.raft import Raft

__all__ = ["handle_append", "handle_snapshot", "step_candidate", "step_follower"]

MT = MessageType


def step_candidate(r: Raft, m: Message) -> None:
    my_resp = MT.PRE_VOTE_RESP if r.state is Role.PRE_CANDIDATE else MT.VOTE_RESP
    t = m.type
    if t is MT.PROP:
        raise ProposalDroppedError("no leader: proposal dropped")
    if t in (MT.APP, MT.HEARTBEAT, MT.SNAP):
        r.become_follower(m.term, m.from_)
        _handle_leader_message(r, m)
    elif t is my_resp:
        result = r.poll(m.from_, not m.reject)
        if result is VoteResult.WON:
            if r.state is Role.PRE_CANDIDATE:
                r.campaign(CampaignType.ELECTION)
            else:
                r.become_leader()
                leader.bcast_append(r)
        elif result is VoteResult.LOST:
            r.become_follower(r.term, NONE)


def step_follower(r: Raft, m: Message) -> None:
    t = m.type
    if t is MT.PROP:
        if r.lead == NONE:
            raise ProposalDroppedError("no leader: proposal dropped")
        if r.disable_proposal_forwarding:
            raise ProposalDroppedError("proposal forwarding disabled")
        r.send(Message(MT.PROP, r.lead, r.id, entries=m.entries))
    elif t in (MT.APP, MT.HEARTBEAT, MT.SNAP):
        r.election_elapsed = 0
        r.lead = m.from_
        _handle_leader_message(r, m)
    elif t is MT.TRANSFER_LEADER:
        if r.lead != NONE:
            r.send(Message(MT.TRANSFER_LEADER, r.lead, m.from_))
    elif t is MT.TIMEOUT_NOW:
        # Leader transfer: campaign at once, even with pre-vote and leases.
        r.hup(CampaignType.TRANSFER)
    elif t is MT.READ_INDEX:
        if r.lead != NONE:
            r.send(Message(MT.READ_INDEX, r.lead, r.id, context=m.context))
    elif t is MT.READ_INDEX_RESP:
        r.read_states.append(ReadState(m.index, m.context))
    elif t is MT.UNREACHABLE and m.from_ == r.lead != NONE:
        _leader_gone(r)


def _leader_gone(r: Raft) -> None:
    """The transport lost our leader's connection (its process ended: kill -9, a crash, a
    stop; the kernel closes its sockets): campaign at the next tick instead of waiting out the
    election timeout, as ZooKeeper's followers do on a broken leader socket. Pre-vote still
    asks first, so a leader that is in fact alive keeps its term: the others are in its lease,
    and its next heartbeat makes us its follower again (or cancels the campaign if it comes
    before our next tick). Both survivors usually hear this at once: the crossed pre-votes are
    settled in `Raft._handle_vote_request`."""
    r.lead = NONE
    r.election_elapsed = max(r.election_elapsed, r.randomized_election_timeout - 1)


def _handle_leader_message(r: Raft, m: Message) -> None:
    if m.type is MT.APP:
        handle_append(r, m)
    elif m.type is MT.HEARTBEAT:
        r.raft_log.commit_to(m.commit)
        r.send(r.msg(MT.HEARTBEAT_RESP, m.from_, context=m.context))
    else:
        handle_snapshot(r, m)


# ------------------------------------------------------------------ follower replication
def handle_append(r: Raft, m: Message) -> None:
    log = r.raft_log
    if m.index < log.committed:
        r.send(r.msg(MT.APP_RESP, m.from_, index=log.committed))
        return
    last_new = log.maybe_append(m.index, m.log_term, m.commit, m.entries)
    if last_new is not None:
        r.send(r.msg(MT.APP_RESP, m.from_, index=last_new))
        return
    # Consistency check failed. Hint the last index that could match, skipping every
    # entry whose term is greater than the leader's term at m.index (fast back-off).
    hint = log.find_conflict_by_term(min(m.index, log.last_index()), m.log_term)
    try:
        hint_term = log.term(hint)
    except CompactedError:
        hint_term = 0
    r.send(
        r.msg(
            MT.APP_RESP,
            m.from_,
            index=m.index,
            reject=True,
            reject_hint=hint,
            log_term=hint_term,
        )
    )


def handle_snapshot(r: Raft, m: Message) -> None:
    assert m.snapshot is not None
    restored = r.restore(m.snapshot)
    index = r.raft_log.last_index() if restored else r.raft_log.committed
    r.send(r.msg(MT.APP_RESP, m.from_, index=index))
