"""The chaos network itself: faults, partitions, crashes behave as documented."""

from __future__ import annotations

from gpu_platform.domain.consensus.types import Role
from gpu_platform.testing.raft_network import Faults, NodeOptions, RaftNetwork


def test_a_network_that_drops_everything_elects_nobody() -> None:
    net = RaftNetwork([1, 2, 3], seed=1, faults=Faults(drop=1.0))
    net.run(100)
    assert net.leader() is None and net.delivered == 0 and net.dropped > 0


def test_duplicated_and_delayed_messages_are_delivered_more_often_and_later() -> None:
    plain = RaftNetwork([1, 2, 3], seed=2)
    noisy = RaftNetwork([1, 2, 3], seed=2, faults=Faults(duplicate=0.5, min_delay=1, max_delay=3))
    for net in (plain, noisy):
        assert net.run_until(lambda n=net: n.leader() is not None, 300) is not None
        for i in range(10):
            net.propose(b"%d" % i)
        net.run(20)
    assert noisy.delivered > plain.delivered
    assert noisy.nodes[1].digest == noisy.nodes[2].digest == noisy.nodes[3].digest


def test_partitioned_groups_cannot_talk_and_healing_reconnects_them() -> None:
    net = RaftNetwork([1, 2, 3, 4, 5], seed=3)
    net.partition([1, 2], [3, 4, 5])
    assert not net.connected(1, 3) and net.connected(1, 2) and net.connected(4, 5)
    net.run(100)
    lead = net.leader()
    assert lead in (3, 4, 5)
    net.heal()
    assert net.connected(1, 3)
    net.run(30)
    assert all(net.nodes[i].node.raft.lead == net.leader() for i in range(1, 6))


def test_a_crashed_node_keeps_only_its_storage() -> None:
    net = RaftNetwork([1, 2, 3], seed=4, options=NodeOptions(snapshot_every=2))
    assert net.run_until(lambda: net.leader() is not None, 300) is not None
    for i in range(6):
        net.propose(b"%d" % i)
    net.run(3)
    node = net.nodes[2]
    hs, last = node.storage.hard_state, node.storage.last_index()
    net.crash(2)
    assert not node.alive and node.storage.hard_state == hs
    net.restart(2)
    restarted = net.nodes[2].node.raft
    assert restarted.state is Role.FOLLOWER and restarted.term == hs.term
    assert restarted.raft_log.last_index() == last
