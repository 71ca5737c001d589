"""Membership changes: learners, one voter at a time, joint consensus, removing the leader."""

from __future__ import annotations

import random

import pytest

from gpu_platform.domain.consensus.raft import Config, Raft
from gpu_platform.domain.consensus.storage import MemoryStorage
from gpu_platform.domain.consensus.types import (
    ConfChange,
    ConfChangeSingle,
    ConfChangeTransition,
    ConfChangeType,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Message,
    MessageType,
    Role,
)
from gpu_platform.testing.raft_network import NodeOptions, RaftNetwork

V, L, R = ConfChangeType.ADD_NODE, ConfChangeType.ADD_LEARNER_NODE, ConfChangeType.REMOVE_NODE


def change(
    *pairs: tuple[ConfChangeType, int], transition: ConfChangeTransition = ConfChangeTransition.AUTO
) -> ConfChange:
    return ConfChange(tuple(ConfChangeSingle(t, i) for t, i in pairs), transition)


def settled(net: RaftNetwork, ticks: int = 30) -> int:
    assert net.run_until(lambda: net.leader() is not None, 300) is not None
    net.run(ticks)
    lead = net.leader()
    assert lead is not None
    return lead


def voters(net: RaftNetwork, node: int) -> tuple[int, ...]:
    return net.nodes[node].conf_state.voters


def test_a_learner_receives_the_log_but_neither_votes_nor_counts_for_commit() -> None:
    net = RaftNetwork([1, 2, 3], seed=1, options=NodeOptions(snapshot_every=3))
    lead = settled(net)
    net.add_node(4)
    assert net.propose_conf_change(change((L, 4)))
    net.run(20)
    assert net.nodes[4].conf_state.learners == (4,)
    assert net.propose(b"to-learner")
    net.run(5)
    assert b"to-learner" in net.committed_payloads(4)
    raft = net.nodes[lead].node.raft
    assert raft.prs.progress[4].is_learner and 4 not in raft.prs.config.voters.ids()
    # With both other voters down, the learner cannot help commit anything.
    others = [i for i in (1, 2, 3) if i != lead]
    for i in others:
        net.crash(i)
    commit = net.commit_index(lead)
    net.propose(b"stuck")
    net.run(5)
    assert net.commit_index(lead) == commit


def test_a_learner_promoted_to_voter_counts_for_quorum() -> None:
    net = RaftNetwork([1, 2, 3], seed=2)
    settled(net)
    net.add_node(4)
    net.propose_conf_change(change((L, 4)))
    net.run(20)
    net.propose_conf_change(change((V, 4)))
    net.run(20)
    assert all(voters(net, i) == (1, 2, 3, 4) for i in (1, 2, 3, 4))


def test_adding_a_voter_one_at_a_time_lets_the_new_node_catch_up_and_vote() -> None:
    net = RaftNetwork([1, 2, 3], seed=4, options=NodeOptions(snapshot_every=4))
    settled(net)
    for i in range(10):
        net.propose(b"x%d" % i)
    net.add_node(4)
    assert net.propose_conf_change(change((V, 4)))
    net.run(40)
    assert voters(net, 4) == (1, 2, 3, 4)
    assert net.nodes[4].digest == net.nodes[1].digest
    lead = net.leader()
    assert lead is not None
    # Two of four voters down: no quorum of four; three up: progress continues.
    down = [i for i in (1, 2, 3, 4) if i != lead][:1]
    for i in down:
        net.crash(i)
    assert net.propose(b"with-4")
    net.run(5)
    assert b"with-4" in net.committed_payloads(lead)


def test_removing_a_follower_shrinks_the_quorum() -> None:
    net = RaftNetwork([1, 2, 3], seed=6)
    lead = settled(net)
    gone = next(i for i in (1, 2, 3) if i != lead)
    assert net.propose_conf_change(change((R, gone)))
    net.run(20)
    net.crash(gone)
    remaining = [i for i in (1, 2, 3) if i != gone]
    assert voters(net, lead) == tuple(remaining)
    other = next(i for i in remaining if i != lead)
    net.crash(other)  # one of two voters left: a single voter is not a majority of two
    commit = net.commit_index(lead)
    net.propose(b"no-quorum")
    net.run(3)
    assert net.commit_index(lead) == commit


def test_removing_the_leader_makes_it_step_down_and_the_rest_elect_a_new_one() -> None:
    net = RaftNetwork([1, 2, 3], seed=7)
    lead = settled(net)
    assert net.propose_conf_change(change((R, lead)))
    net.run(60)
    new_lead = net.leader()
    assert new_lead is not None and new_lead != lead
    assert net.propose(b"after-removal")
    net.run(5)
    assert b"after-removal" in net.committed_payloads(new_lead)


def test_joint_consensus_replaces_two_voters_at_once_and_leaves_automatically() -> None:
    net = RaftNetwork([1, 2, 3], seed=9)
    lead = settled(net)
    net.add_node(4)
    net.add_node(5)
    olds = [i for i in (1, 2, 3) if i != lead]
    assert net.propose_conf_change(change((V, 4), (V, 5), (R, olds[0]), (R, olds[1])))
    net.run(60)
    final = tuple(sorted([lead, 4, 5]))
    for i in (lead, 4, 5):
        cs = net.nodes[i].conf_state
        assert cs.voters == final and cs.voters_outgoing == ()


def test_an_explicit_joint_configuration_is_left_only_by_an_empty_change() -> None:
    net = RaftNetwork([1, 2, 3], seed=10)
    lead = settled(net)
    net.add_node(4)
    assert net.propose_conf_change(change((V, 4), transition=ConfChangeTransition.EXPLICIT))
    net.run(20)
    assert net.nodes[lead].conf_state.voters_outgoing == (1, 2, 3)
    raft = net.nodes[lead].node.raft
    assert raft.prs.config.voters.is_joint()
    assert net.propose_conf_change(ConfChange())
    net.run(20)
    assert net.nodes[lead].conf_state.voters == (1, 2, 3, 4)
    assert net.nodes[lead].conf_state.voters_outgoing == ()


def test_a_second_conf_change_is_refused_while_one_is_pending() -> None:
    net = RaftNetwork([1, 2, 3], seed=11)
    lead = settled(net)
    net.add_node(4)
    net.add_node(5)
    raft = net.nodes[lead].node.raft
    net.nodes[lead].node.propose_conf_change(change((L, 4)))
    net.nodes[lead].node.propose_conf_change(change((L, 5)))
    ents = raft.raft_log.entries(raft.raft_log.last_index() - 1)
    assert [e.type for e in ents] == [EntryType.CONF_CHANGE, EntryType.NORMAL]
    net.call(lead, lambda rn: None)
    net.run(20)
    assert net.nodes[lead].conf_state.learners == (4,)


@pytest.mark.parametrize(("applied", "campaigns"), [(1, False), (2, True)])
def test_a_node_never_campaigns_while_a_committed_conf_change_is_unapplied(
    applied: int, campaigns: bool
) -> None:
    st = MemoryStorage(ConfState(voters=(1, 2, 3)))
    cc = change((L, 9)).encode()
    st.append([Entry(1, 1), Entry(1, 2, EntryType.CONF_CHANGE, cc)])
    st.set_hard_state(HardState(term=1, commit=2))
    r = Raft(Config(id=1, applied=applied), st, random.Random(0))
    r.step(Message(MessageType.HUP, 1, 1))
    assert (r.state is Role.CANDIDATE) is campaigns
