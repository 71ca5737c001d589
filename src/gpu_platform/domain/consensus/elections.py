"""Who campaigns when, after a leader is lost (issue 21: failover without split votes).

Theory of operation. Two survivors of a 3-server cluster that both become candidates of one
term split the vote and wait another election timeout. `Raft._handle_vote_request` backs a
pre-vote only if `outranks` is False, and a granted pre-vote restarts the granter's election
clock (there); `ask_again` repeats a (pre-)candidate's requests that got no answer. Pre-votes
decide nothing and a repeated request changes nothing, so none of this touches safety: a real
vote is still granted at most once per term, to a log at least as up to date.

Functions over `Raft` (not methods), like `leader.py` and `follower.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_platform.domain.consensus.types import Message, MessageType, Role

if TYPE_CHECKING:
    from gpu_platform.domain.consensus.raft import Raft

__all__ = ["ask_again", "outranks"]

MT = MessageType


def outranks(r: Raft, m: Message) -> bool:
    """A pre-vote that crossed our own (for the same term, our pre-campaign less than half an
    election timeout old): only the peer ranked higher by (last log term, last index, id) is
    backed, so at most one of the two goes on to a real vote (no split vote). The window is
    bounded so that a peer that cannot win (a partial partition) delays the other's campaign
    only now and then."""
    if not (
        m.type is MT.PRE_VOTE
        and r.state is Role.PRE_CANDIDATE
        and r.election_elapsed < max(1, r.election_timeout // 2)
        and m.term == r.term + 1
    ):
        return False
    log = r.raft_log
    return (log.last_term(), log.last_index(), r.id) > (m.log_term, m.index, m.from_)


def ask_again(r: Raft) -> None:
    """A (pre-)candidate asks the voters that have not answered once more (every heartbeat
    interval): a request lost on the way (a link to a peer that restarted since, still
    reconnecting) would otherwise cost a whole election timeout. A repeated request changes
    nothing: a pre-vote never does, and a vote is granted again only to the node it was
    granted to."""
    pre = r.state is Role.PRE_CANDIDATE
    vote_msg, term = (MT.PRE_VOTE, r.term + 1) if pre else (MT.VOTE, r.term)
    last, last_term = r.raft_log.last_index(), r.raft_log.last_term()
    for vid in r.prs.voter_nodes():
        if vid != r.id and vid not in r.prs.votes:
            r.send(Message(vote_msg, vid, r.id, term, last_term, last))
