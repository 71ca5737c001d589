"""Split votes after a leader dies (issue 21: failover p99): the two survivors of a 3-server
cluster must not both become candidates of the same term.

Two rules of `Raft._handle_vote_request`: a granted pre-vote restarts the granter's election
clock (so the peer it backed has a whole timeout to win), and of two pre-campaigns begun in the
same tick whose pre-votes cross, only the higher-ranked one (last log term, last index, id) is
backed. Pre-votes decide nothing about safety (the real votes do); these rules only change
who campaigns when.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.consensus.raft import Raft
from gpu_platform.domain.consensus.types import Entry, Message, MessageType, Role

from ._cluster import Cluster, take

MT = MessageType


def _survivors_of_a_dead_leader(seed: int = 0) -> Cluster:
    """3 servers with pre-vote and check-quorum; 1 led term 1 and is now gone."""
    c = Cluster.of(3, pre_vote=True, check_quorum=True, seed=seed)
    c.hup(1)
    c.propose(1)
    assert c[1].state is Role.LEADER
    c.peers[1] = None
    return c


def _time_out(r: Raft) -> list[Message]:
    """Tick `r` until its election timeout starts a pre-campaign; the messages it sent."""
    take(r)
    for _ in range(2 * r.election_timeout + 1):
        r.tick()
        if r.state is Role.PRE_CANDIDATE:
            return take(r)
    raise AssertionError("no pre-campaign")


def test_crossed_pre_votes_of_one_tick_send_only_one_survivor_to_a_real_vote() -> None:
    c = _survivors_of_a_dead_leader()
    sent = _time_out(c[2]) + _time_out(c[3])  # both pre-vote before either hears the other
    c.delivered.clear()
    c.send(*sent)
    leaders = [i for i in (2, 3) if c[i].state is Role.LEADER]
    assert leaders == [3]  # equal logs: the higher id is backed
    assert c[2].state is Role.FOLLOWER and c[2].lead == 3
    assert c[2].term == c[3].term == 2  # one election, no split vote
    assert [m.from_ for m in c.delivered if m.type is MT.VOTE] == [3]


def test_a_survivor_with_a_longer_log_wins_crossed_pre_votes_whatever_its_id() -> None:
    c = _survivors_of_a_dead_leader()
    # 2 holds an entry of term 1 that 3 lacks (as if 3 missed the leader's last append).
    c[2].raft_log.append([Entry(1, c[2].raft_log.last_index() + 1, data=b"y")])
    sent = _time_out(c[2]) + _time_out(c[3])
    c.send(*sent)
    assert c[2].state is Role.LEADER and c[2].term == 2
    assert c[3].state is Role.FOLLOWER and c[3].term == 2


def test_a_follower_that_backed_a_pre_vote_waits_a_whole_timeout_for_the_real_vote() -> None:
    c = _survivors_of_a_dead_leader()
    pre_votes = _time_out(c[2])
    take(c[3])
    # 3 is one tick from its own timeout when 2's pre-vote arrives, and backs it ...
    c[3].election_elapsed = c[3].randomized_election_timeout - 1
    c[3].step(next(m for m in pre_votes if m.to == 3))
    assert [m.type for m in c[3].msgs] == [MT.PRE_VOTE_RESP] and not c[3].msgs[0].reject
    # ... then hears nothing for a while (2's real vote is slow: an fsync under load) ...
    grant = take(c[3])
    for _ in range(c[3].election_timeout - 1):
        c[3].tick()
    assert c[3].state is Role.FOLLOWER and take(c[3]) == []
    # ... and the real vote that comes makes 2 leader of the next term: no split vote.
    c.send(*grant)
    assert c[2].state is Role.LEADER and c[2].term == 2 and c[3].term == 2


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    lag=st.integers(0, 3),
    late=st.sampled_from([2, 3]),
)
def test_two_survivors_whose_timeouts_fall_within_a_tick_elect_in_one_term(
    seed: int, lag: int, late: int
) -> None:
    """Survivor `late` times out `lag` ticks after the other; messages in flight when it does
    are delivered after its own pre-votes went out (they cross)."""
    c = _survivors_of_a_dead_leader(seed)
    early = 5 - late
    sent = _time_out(c[early])
    for _ in range(lag):
        c[late].tick()
    take(c[late])
    c[late].election_elapsed = c[late].randomized_election_timeout - 1
    c[late].tick()
    if c[late].state is Role.PRE_CANDIDATE:
        sent += take(c[late])
    c.send(*sent)
    for _ in range(3 * c[2].election_timeout):  # whatever is left to settle
        if any(c[i].state is Role.LEADER for i in (2, 3)):
            break
        c.tick(2)
        c.tick(3)
    assert max(c[2].term, c[3].term) == 2
    assert [c[i].state for i in (2, 3)].count(Role.LEADER) == 1


def test_a_follower_told_its_leaders_link_closed_campaigns_at_its_next_tick() -> None:
    c = _survivors_of_a_dead_leader()
    take(c[2])
    c[2].step(Message(MT.UNREACHABLE, from_=1))  # the transport: 1's stream to us ended
    assert c[2].lead == 0 and c[2].state is Role.FOLLOWER
    c[2].tick()
    assert c[2].state is Role.PRE_CANDIDATE


def test_the_survivors_told_at_once_that_the_leader_is_gone_elect_one_leader_in_one_term() -> None:
    c = _survivors_of_a_dead_leader()
    for i in (2, 3):
        take(c[i])
        c[i].step(Message(MT.UNREACHABLE, from_=1))
        c[i].tick()
    c.flush()  # both pre-votes crossed
    assert [c[i].state for i in (2, 3)] == [Role.FOLLOWER, Role.LEADER]
    assert c[2].term == c[3].term == 2


def test_an_unreachable_report_about_another_peer_changes_nothing_for_a_follower() -> None:
    c = _survivors_of_a_dead_leader()
    c[2].step(Message(MT.UNREACHABLE, from_=3))
    c[2].tick()
    assert c[2].lead == 1 and c[2].state is Role.FOLLOWER


def test_a_live_leader_heard_after_a_false_report_keeps_its_term_and_its_followers() -> None:
    c = Cluster.of(3, pre_vote=True, check_quorum=True)
    c.hup(1)
    c[2].step(Message(MT.UNREACHABLE, from_=1))  # a stream restarted: the leader is alive
    c.tick(2)  # 2 pre-campaigns; 3 is in the leader's lease and ignores it
    c.tick(1)  # the leader's heartbeat
    assert c[1].state is Role.LEADER and c[1].term == 1
    assert c[2].state is Role.FOLLOWER and c[2].lead == 1 and c[2].term == 1


def test_a_pre_vote_lost_on_the_way_is_asked_again_at_the_next_heartbeat_interval() -> None:
    c = _survivors_of_a_dead_leader()
    c[3].step(Message(MT.UNREACHABLE, from_=1))  # 3 knows the leader is gone, too
    _time_out(c[2])  # 2's pre-votes are lost (a link to a peer still reconnecting)
    c[2].tick()
    again = [m for m in take(c[2]) if m.type is MT.PRE_VOTE]
    assert sorted(m.to for m in again) == [1, 3] and all(m.term == 2 for m in again)
    c.send(*again)
    assert c[2].state is Role.LEADER and c[2].term == 2  # not a whole timeout later


def test_a_pre_candidate_asks_again_only_the_voters_that_have_not_answered() -> None:
    c = _survivors_of_a_dead_leader()
    c[3].raft_log.append([Entry(1, c[3].raft_log.last_index() + 1, data=b"y")])
    c[3].step(Message(MT.UNREACHABLE, from_=1))
    take(c[2])
    c[2].step(Message(MT.UNREACHABLE, from_=1))
    c[2].tick()
    c.send(*[m for m in take(c[2]) if m.to == 3])  # 3's log is longer: it refuses
    assert c[2].prs.votes == {2: True, 3: False}
    c[2].tick()
    assert [m.to for m in take(c[2]) if m.type is MT.PRE_VOTE] == [1]
