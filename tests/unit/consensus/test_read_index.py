"""ReadIndex: linearizable reads confirmed by a heartbeat quorum (or a lease)."""

from __future__ import annotations

from gpu_platform.domain.consensus.types import Message, MessageType, ReadOnlyOption, Role
from gpu_platform.testing.raft_network import NodeOptions, RaftNetwork

from ._cluster import Cluster, new_raft, take

MT = MessageType


def settled(net: RaftNetwork) -> int:
    assert net.run_until(lambda: net.leader() is not None, 300) is not None
    net.run(5)
    lead = net.leader()
    assert lead is not None
    return lead


def test_a_read_on_the_leader_returns_the_commit_index_after_a_heartbeat_quorum() -> None:
    net = RaftNetwork([1, 2, 3], seed=1)
    lead = settled(net)
    net.propose(b"w")
    net.run(2)
    net.call(lead, lambda rn: rn.read_index(b"r1"))
    net.run(1)
    (rs,) = net.nodes[lead].read_states
    assert rs.request_ctx == b"r1" and rs.index == net.commit_index(lead)


def test_a_read_on_a_follower_is_forwarded_and_answered_with_the_leaders_commit_index() -> None:
    net = RaftNetwork([1, 2, 3], seed=2)
    lead = settled(net)
    follower = next(i for i in (1, 2, 3) if i != lead)
    net.call(follower, lambda rn: rn.read_index(b"f1"))
    net.run(2)
    (rs,) = net.nodes[follower].read_states
    assert rs.request_ctx == b"f1" and rs.index == net.commit_index(lead)


def test_a_leader_cut_off_from_the_quorum_answers_no_read() -> None:
    net = RaftNetwork([1, 2, 3], seed=3, options=NodeOptions(check_quorum=False))
    lead = settled(net)
    net.isolate(lead)
    net.call(lead, lambda rn: rn.read_index(b"lost"))
    net.run(30)
    assert net.nodes[lead].read_states == []


def test_a_new_leader_defers_reads_until_an_entry_of_its_term_commits() -> None:
    c = Cluster({1: new_raft(1), 2: None, 3: None})
    c.hup(1)
    lead = c[1]
    lead.step(Message(MT.VOTE_RESP, 1, 2, term=1))
    assert lead.state is Role.LEADER and lead.raft_log.committed == 0
    take(lead)
    lead.step(Message(MT.READ_INDEX, 1, 1, context=b"early"))
    assert take(lead) == [] and lead.read_states == []  # nothing of term 1 is committed yet
    lead.step(Message(MT.APP_RESP, 1, 2, term=1, index=1))
    assert lead.raft_log.committed == 1
    heartbeats = [m for m in take(lead) if m.type is MT.HEARTBEAT]
    assert {m.context for m in heartbeats} == {b"early"}
    lead.step(Message(MT.HEARTBEAT_RESP, 1, 2, term=1, context=b"early"))
    assert [(rs.index, rs.request_ctx) for rs in lead.read_states] == [(1, b"early")]


def test_lease_based_reads_are_answered_without_a_heartbeat_round() -> None:
    c = Cluster.of(3, check_quorum=True, read_only_option=ReadOnlyOption.LEASE_BASED)
    c.hup(1)
    lead = c[1]
    lead.step(Message(MT.READ_INDEX, 1, 1, context=b"lease"))
    assert [m for m in take(lead) if m.type is MT.HEARTBEAT] == []
    assert [rs.request_ctx for rs in lead.read_states] == [b"lease"]
