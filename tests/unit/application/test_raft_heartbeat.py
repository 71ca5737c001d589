"""A leader's heartbeats keep going while its Raft loop is stuck (`raft_heartbeat`): real
threads over the in-memory hub; the leader's storage write is held for many election
timeouts and its followers stay in its term."""

from __future__ import annotations

import time
from collections.abc import Sequence

from gpu_platform.application.raft_heartbeat import HeartbeatKeeper
from gpu_platform.application.raft_node import RaftNode, RaftNodeConfig
from gpu_platform.domain.consensus import Message, MessageType, Role
from gpu_platform.testing.raft_fakes import (
    HeldRaftStorage,
    InMemoryRaftHub,
    InMemoryRaftTransport,
)
from gpu_platform.testing.raft_kv import KvStateMachine
from tests.unit.application.test_raft_node import WAIT, put, wait_for

HOLD_S = 1.5  # many election timeouts (0.1-0.2 s here); a wait, never an assert


def test_a_leader_stuck_in_a_storage_write_keeps_its_followers_in_its_term() -> None:
    hub = InMemoryRaftHub()
    storages = {i: HeldRaftStorage(b"hold", WAIT) for i in (1, 2, 3)}
    nodes: dict[int, RaftNode] = {}
    for i in (1, 2, 3):
        t = InMemoryRaftTransport(hub, i)
        hub._transports[i] = t
        cfg = RaftNodeConfig(
            id=i, voters=(1, 2, 3), tick_interval=0.01, seed=i, heartbeat_cover_ticks=1000
        )
        nodes[i] = RaftNode(cfg, storages[i], t, KvStateMachine())
    for n in nodes.values():
        n.start()
    try:
        wait_for(lambda: any(n.status().role is Role.LEADER for n in nodes.values()))
        lead = next(i for i, n in nodes.items() if n.status().role is Role.LEADER)
        assert nodes[lead].propose(put("k", "v")).result(timeout=WAIT) is not None
        wait_for(lambda: all(n.status().leader_id == lead for n in nodes.values()))
        term = nodes[lead].status().term
        storages[lead].hold = True  # the leader's write only: its followers run on
        held = nodes[lead].propose(b"hold")
        assert storages[lead].entered.wait(WAIT)  # the leader's loop is inside its write
        time.sleep(HOLD_S)
        during = {i: (n.status().term, n.status().role) for i, n in nodes.items()}
        storages[lead].release.set()
        for i, (t_i, role) in during.items():
            assert t_i == term, f"node {i} moved to term {t_i} (an election)"
            assert (role is Role.LEADER) == (i == lead)
        held.exception(timeout=WAIT)  # settled either way (b"hold" is no KV command)
    finally:
        for s in storages.values():
            s.release.set()
        for n in nodes.values():
            n.stop()


class Recorder:
    """Records what is sent (the keeper's only use of the transport)."""

    def __init__(self) -> None:
        self.sent: list[tuple[Message, ...]] = []

    def send(self, messages: Sequence[Message]) -> None:
        self.sent.append(tuple(messages))


def test_the_keeper_sends_bare_heartbeats_to_the_leaders_followers_and_stops_when_told() -> None:
    rec = Recorder()
    keeper = HeartbeatKeeper(1, rec, tick_s=0.005, cover_s=60.0)  # type: ignore[arg-type]
    beat = Message(MessageType.HEARTBEAT, to=2, from_=1, term=3, commit=7, context=b"r1")
    app = Message(MessageType.APP, to=2, from_=1, term=3)
    keeper.record([beat, app])
    keeper.start()
    try:
        wait_for(lambda: len(rec.sent) >= 2)  # the loop never ticks: it is stalled
        assert {m for batch in rec.sent for m in batch} == {  # no commit index, no read context
            Message(MessageType.HEARTBEAT, to=2, from_=1, term=3)
        }
        keeper.clear()
        count = len(rec.sent)
        time.sleep(0.05)
        assert len(rec.sent) <= count + 1  # at most one already under way
    finally:
        keeper.stop()
