"""A Raft node stalled itself hears what arrived meanwhile before it campaigns (issue 21).

The driver's tick decision (`RaftNode._tick`) is driven by hand with explicit times (from
`t0`, a minute after the test starts: later than any message the node notes on the real
clock), over a node that is built
but not started (no loop thread): a follower of leader 2 is stalled half a
second, then ticks on time until its next tick would start an election, and the leader's
heartbeat (which had waited in the transport) arrives one interval later. With the deferral
the heartbeat is heard first and no election starts; without it (the driver before this
change, `stall_defer=False`) the node campaigns.
"""

from __future__ import annotations

import time

import pytest

from gpu_platform.application.raft_node import RaftNode, RaftNodeConfig
from gpu_platform.application.raft_stalls import StallWatch
from gpu_platform.domain.consensus import Message, MessageType, Role
from gpu_platform.testing.raft_fakes import InMemoryRaftHub, InMemoryRaftStorage
from gpu_platform.testing.raft_kv import KvStateMachine

TICK = 0.015


@pytest.fixture
def t0() -> float:
    """Taken when the test starts (not at import: a whole suite can outlast a minute)."""
    return time.monotonic() + 60.0


def follower(defer: bool) -> RaftNode:
    cfg = RaftNodeConfig(id=1, voters=(1, 2, 3), tick_interval=TICK, seed=7, stall_defer=defer)
    node = RaftNode(cfg, InMemoryRaftStorage(), InMemoryRaftHub().transport(1), KvStateMachine())
    heartbeat(node)
    assert node.rawnode.raft.lead == 2
    return node


def heartbeat(node: RaftNode) -> None:
    node._handle(("msg", Message(MessageType.HEARTBEAT, 1, 2, 1), None))


def stalled_then_heartbeat(node: RaftNode, t0: float) -> list[Role]:
    """A 500 ms stall, on-time ticks up to the one that would start an election, the leader's
    heartbeat one interval after it was due; the roles seen from that tick on."""
    due = node._tick(t0 + 0.5, t0)  # the stall
    now = due
    while not node.rawnode.tick_ends_period():
        due = node._tick(now, due)
        now = due
    due = node._tick(now, due)  # would start an election
    roles = [node.rawnode.raft.state]
    heartbeat(node)  # what had waited in the transport, delivered within the interval
    for _ in range(2):
        now = due
        due = node._tick(now, due)
        roles.append(node.rawnode.raft.state)
    return roles


def test_a_stalled_follower_hears_the_waiting_heartbeat_before_it_campaigns(t0: float) -> None:
    node = follower(defer=True)
    assert stalled_then_heartbeat(node, t0) == [Role.FOLLOWER] * 3
    assert node.rawnode.raft.term == 1
    assert node._stalls.deferred == 1


def test_without_the_deferral_the_same_follower_campaigns(t0: float) -> None:
    node = follower(defer=False)
    assert stalled_then_heartbeat(node, t0)[0] is Role.PRE_CANDIDATE


def test_a_follower_that_hears_nothing_still_campaigns_one_interval_later(t0: float) -> None:
    node = follower(defer=True)
    due = node._tick(t0 + 0.5, t0)
    now = due
    ticks = 0
    while node.rawnode.raft.state is Role.FOLLOWER:
        due = node._tick(now, due)
        now = due
        ticks += 1
        assert ticks < 100
    assert node.rawnode.raft.state is Role.PRE_CANDIDATE
    assert node._stalls.deferred == 1


@pytest.mark.parametrize("late", [0.0, TICK])
def test_a_node_that_never_stalled_is_never_deferred(late: float) -> None:
    watch = StallWatch(1, TICK, 2 * TICK)
    watch.heard(1.0)
    watch.ticked_late(1.2, late)
    assert not watch.defer(1.3, ends_period=True)


def test_a_stall_defers_only_the_tick_that_ends_the_period_and_only_once() -> None:
    watch = StallWatch(1, TICK, 2 * TICK)
    watch.heard(1.0)
    watch.ticked_late(1.5, 0.4)
    assert not watch.defer(1.6, ends_period=False)
    assert watch.defer(1.7, ends_period=True)
    assert not watch.defer(1.72, ends_period=True)  # the next one counts
    watch.heard(1.8)  # a new period: a stall before it is forgiven
    assert not watch.defer(2.0, ends_period=True)
