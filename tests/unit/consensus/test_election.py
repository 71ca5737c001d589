"""Leader election (Raft §5.2, §5.4.1, thesis §9.6 pre-vote and check-quorum)."""

from __future__ import annotations

import random

import pytest

from gpu_platform.domain.consensus.errors import ProposalDroppedError
from gpu_platform.domain.consensus.raft import ROLE_TRANSITIONS, Config, Raft
from gpu_platform.domain.consensus.storage import MemoryStorage
from gpu_platform.domain.consensus.types import ConfState, Message, MessageType, Role
from gpu_platform.domain.errors import IllegalTransition, InvalidRequest

from ._cluster import Cluster, new_raft, take

MT = MessageType


def elect(c: Cluster, node_id: int = 1) -> None:
    c.hup(node_id)
    assert c[node_id].state is Role.LEADER


def test_a_follower_that_hears_nothing_for_its_election_timeout_starts_an_election() -> None:
    r = new_raft(1, election_tick=10)
    for _ in range(2 * 10):
        r.tick()
        if r.state is Role.CANDIDATE:
            break
    assert r.state is Role.CANDIDATE
    assert r.term == 1 and r.vote == 1
    votes = [m for m in take(r) if m.type is MT.VOTE]
    assert sorted(m.to for m in votes) == [2, 3]
    assert all(m.term == 1 and m.index == 0 for m in votes)


def test_randomized_election_timeouts_lie_in_et_to_twice_et_and_depend_only_on_the_seed() -> None:
    seen = set()
    for seed in range(40):
        r = new_raft(1, seed=seed, election_tick=10)
        r.become_follower(r.term + 1, 0)
        assert 10 <= r.randomized_election_timeout < 20
        seen.add(r.randomized_election_timeout)
        again = new_raft(1, seed=seed, election_tick=10)
        again.become_follower(again.term + 1, 0)
        assert again.randomized_election_timeout == r.randomized_election_timeout
    assert len(seen) > 5


@pytest.mark.parametrize("n", [1, 3, 5])
def test_a_candidate_with_votes_from_a_majority_becomes_leader(n: int) -> None:
    c = Cluster.of(n)
    elect(c)
    assert c[1].term == 1
    assert all(c[i].state is Role.FOLLOWER and c[i].lead == 1 for i in range(2, n + 1))


def test_a_candidate_rejected_by_a_majority_returns_to_follower() -> None:
    r = new_raft(1, (1, 2, 3, 4, 5))
    r.step(Message(MT.HUP, 1, 1))
    for voter in (2, 3, 4):
        r.step(Message(MT.VOTE_RESP, 1, voter, 1, reject=True))
    assert r.state is Role.FOLLOWER and r.term == 1


def test_a_candidate_without_a_majority_stays_candidate() -> None:
    c = Cluster({1: new_raft(1, (1, 2, 3, 4, 5)), 2: None, 3: None, 4: None, 5: None})
    c.hup(1)
    assert c[1].state is Role.CANDIDATE


def test_a_node_grants_at_most_one_vote_per_term_first_come_first_served() -> None:
    r = new_raft(3)
    r.step(Message(MT.VOTE, 3, 1, term=1))
    r.step(Message(MT.VOTE, 3, 2, term=1))
    r.step(Message(MT.VOTE, 3, 1, term=1))  # a retransmission is granted again
    resps = [(m.to, m.reject) for m in take(r)]
    assert resps == [(1, False), (2, True), (1, False)]
    assert r.vote == 1


@pytest.mark.parametrize(
    ("cand_index", "cand_term", "granted"),
    [
        (2, 2, False),  # shorter log, same last term
        (3, 2, True),  # same log
        (4, 2, True),  # longer log, same last term
        (1, 3, True),  # higher last term wins even if shorter
        (5, 1, False),  # lower last term loses even if longer
    ],
)
def test_a_node_votes_only_for_candidates_whose_log_is_at_least_as_up_to_date(
    cand_index: int, cand_term: int, granted: bool
) -> None:
    voter = new_raft(1, terms=(1, 2, 2))
    voter.step(Message(MT.VOTE, 1, 2, term=5, log_term=cand_term, index=cand_index))
    (resp,) = take(voter)
    assert resp.reject is not granted


def test_a_node_that_sees_a_higher_term_adopts_it_and_becomes_follower() -> None:
    c = Cluster.of(3)
    elect(c)
    c[1].step(Message(MT.APP_RESP, 1, 2, term=7))
    assert c[1].state is Role.FOLLOWER and c[1].term == 7 and c[1].vote == 0


def test_a_message_from_a_stale_term_is_ignored() -> None:
    r = new_raft(1)
    r.become_follower(5, 0)
    r.step(Message(MT.APP, 1, 2, term=3, entries=()))
    assert r.term == 5 and r.lead == 0
    assert take(r) == []


def test_a_candidate_that_hears_from_a_leader_of_its_term_steps_down() -> None:
    r = new_raft(1)
    r.step(Message(MT.HUP, 1, 1))
    take(r)
    r.step(Message(MT.APP, 1, 2, term=1, log_term=0, index=0, commit=0))
    assert r.state is Role.FOLLOWER and r.lead == 2


def test_pre_vote_keeps_an_isolated_node_from_inflating_its_term() -> None:
    c = Cluster.of(3, pre_vote=True)
    elect(c)
    c.isolate(3)
    c.propose(1)  # the majority moves on while 3 is away, so 3's log falls behind
    for _ in range(5):
        c.tick(3, 20)
    assert c[3].term == 1 and c[3].state is Role.PRE_CANDIDATE
    c.heal()
    c.tick(3, 20)  # its pre-votes are refused: nobody's term moves
    assert c[1].state is Role.LEADER and c[1].term == 1 and c[2].term == 1


def test_without_pre_vote_a_rejoining_node_disrupts_the_leader() -> None:
    c = Cluster.of(3)
    elect(c)
    c.isolate(3)
    c.tick(3, 20)
    assert c[3].term == 2
    c.heal()
    c.tick(3, 20)  # its next campaign carries a higher term: the leader must step down
    assert c[1].state is Role.FOLLOWER and c[1].term >= 3


def test_check_quorum_makes_a_leader_that_cannot_hear_a_quorum_step_down() -> None:
    c = Cluster.of(3, check_quorum=True)
    elect(c)
    c.isolate(1)
    c.tick(1, 10)  # first check: followers were active in the last timeout
    c.tick(1, 10)
    assert c[1].state is Role.FOLLOWER


def test_check_quorum_keeps_a_leader_that_hears_a_quorum() -> None:
    c = Cluster.of(3, check_quorum=True)
    elect(c)
    c.peers[3] = None
    for _ in range(5):
        c.tick(1, 10)
    assert c[1].state is Role.LEADER


def test_with_check_quorum_followers_in_a_leader_lease_ignore_vote_requests() -> None:
    c = Cluster.of(3, check_quorum=True)
    elect(c)
    c[2].step(Message(MT.VOTE, 2, 3, term=2, log_term=1, index=1))
    assert take(c[2]) == [] and c[2].term == 1


def test_a_learner_never_campaigns() -> None:
    st = MemoryStorage(ConfState(voters=(1,), learners=(2,)))
    r = Raft(Config(id=2), st, random.Random(0))
    for _ in range(100):
        r.tick()
    assert r.state is Role.FOLLOWER and take(r) == []


def test_proposals_without_a_leader_are_dropped() -> None:
    r = new_raft(1)
    with pytest.raises(ProposalDroppedError):
        r.step(Message(MT.PROP, 1, 1, entries=()))


def test_every_role_change_is_either_in_the_table_or_refused() -> None:
    for src in Role:
        for dst in Role:
            r = new_raft(1, (1,))
            r.state = src
            if (src, dst) in ROLE_TRANSITIONS:
                r._set_role(dst)
                assert r.state is dst
            else:
                with pytest.raises(IllegalTransition):
                    r._set_role(dst)


def test_an_invalid_configuration_is_refused() -> None:
    with pytest.raises(InvalidRequest):
        Config(id=1, election_tick=1, heartbeat_tick=1).validate()
    with pytest.raises(InvalidRequest):
        Config(id=0).validate()


# ---------------------------------------------------------------- leader transfer
def test_leader_transfer_to_an_up_to_date_follower_makes_it_leader() -> None:
    c = Cluster.of(3)
    elect(c)
    c.send(Message(MT.TRANSFER_LEADER, 1, 3))
    assert c[3].state is Role.LEADER and c[3].term == 2
    assert c[1].state is Role.FOLLOWER and c[1].lead == 3


def test_leader_transfer_to_a_lagging_follower_first_catches_it_up() -> None:
    c = Cluster.of(3)
    elect(c)
    c.ignored.add(MT.APP)
    c.peers[3], saved = None, c[3]
    c.ignored.clear()
    c.propose(1)
    c.peers[3] = saved
    assert c[3].raft_log.last_index() < c[1].raft_log.last_index()
    c.send(Message(MT.TRANSFER_LEADER, 1, 3))
    assert c[3].state is Role.LEADER


def test_leader_transfer_bypasses_pre_vote_and_the_followers_leader_lease() -> None:
    c = Cluster.of(3, pre_vote=True, check_quorum=True)
    elect(c)
    c.send(Message(MT.TRANSFER_LEADER, 1, 2))
    assert c[2].state is Role.LEADER and c[2].term == 2
    assert c[1].lead == 2 and c[3].lead == 2


def test_proposals_are_dropped_while_a_leader_transfer_is_in_progress() -> None:
    c = Cluster.of(3)
    elect(c)
    c.peers[3] = None
    c.send(Message(MT.TRANSFER_LEADER, 1, 3))
    assert c[1].lead_transferee == 3
    with pytest.raises(ProposalDroppedError):
        c[1].step(Message(MT.PROP, 1, 1, entries=(c[1].raft_log.all_entries()[-1],)))


def test_an_unfinished_leader_transfer_is_abandoned_after_an_election_timeout() -> None:
    c = Cluster.of(3)
    elect(c)
    c.peers[3] = None
    c.send(Message(MT.TRANSFER_LEADER, 1, 3))
    c.tick(1, 10)
    assert c[1].lead_transferee == 0 and c[1].state is Role.LEADER


def test_transferring_leadership_to_oneself_does_nothing() -> None:
    c = Cluster.of(3)
    elect(c)
    c.send(Message(MT.TRANSFER_LEADER, 1, 1))
    assert c[1].state is Role.LEADER and c[1].lead_transferee == 0
