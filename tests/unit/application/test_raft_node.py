"""RaftNode, the Raft driver, over the in-memory hub and storage (real threads, fake I/O)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future

import pytest

from gpu_platform.application.raft_node import (
    NodeStopped,
    NotLeader,
    RaftNode,
    RaftNodeConfig,
    StateMachine,
)
from gpu_platform.domain.consensus import Message, MessageType, Role
from gpu_platform.testing.raft_fakes import (
    InMemoryRaftHub,
    InMemoryRaftStorage,
    InMemoryRaftTransport,
)
from gpu_platform.testing.raft_kv import KvStateMachine

WAIT = 30.0  # generous: the machine is shared; never a timing assert


def wait_for(cond: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def put(key: str, value: str) -> bytes:
    return json.dumps({"key": key, "value": value}).encode()


class Violation(AssertionError):
    pass


class CheckedStorage(InMemoryRaftStorage):
    """Records what is durable, so the transport and the state machine can check order."""


class CheckedTransport(InMemoryRaftTransport):
    """Checks, at send time, that what a message vouches for is already durable."""

    storage: CheckedStorage
    violations: list[str]
    # True: the hub's delivery thread runs the receiving node's loop work (`raft_inbox`), as
    # a TCP reader thread does.
    inline_delivery = False

    def send(self, messages: Sequence[Message]) -> None:
        hs = self.storage.hard_state
        for m in messages:
            prevote = m.type in (MessageType.PRE_VOTE, MessageType.PRE_VOTE_RESP)
            if m.term > hs.term and not prevote:  # a pre-vote names the next term unpersisted
                self.violations.append(f"sent term {m.term} before persisting it ({hs.term})")
            # A leader's AppendEntries may go out before its own write (its fsync overlaps
            # the followers'); anything else vouching for entries must wait for the disk.
            early = m.type is MessageType.APP and m.term == hs.term
            if m.entries and m.entries[-1].index > self.storage.last_index() and not early:
                self.violations.append(f"sent entry {m.entries[-1].index} before persisting")
            # a grant must be durable in its term; one whose term the node has already left
            # in the same Ready (a higher term persisted) can never be given twice: it is
            # safe (seen once under load, a transfer's campaign and a newer one in one Ready)
            granted = m.type is MessageType.VOTE_RESP and not m.reject
            if granted and hs.term == m.term and hs.vote != m.to:
                self.violations.append(f"granted a vote to {m.to} before persisting it")
        super().send(messages)


class CheckedMachine(KvStateMachine):
    """Checks, at apply time, that the entry is durable."""

    storage: CheckedStorage
    violations: list[str]

    def apply(self, index: int, data: bytes) -> object:
        # The entry must be on this node's disk; the commit index need not be (it is volatile
        # state in Raft, Figure 2: the driver writes it with the next write).
        if self.storage.last_index() < index:
            self.violations.append(f"applied {index} before it was durable")
        return super().apply(index, data)


class Cluster:
    def __init__(self, n: int = 3, inline: bool = False, **overrides: object) -> None:
        self.hub = InMemoryRaftHub()
        self.inline = inline
        self.ids = tuple(range(1, n + 1))
        self.overrides = overrides
        self.violations: list[str] = []
        self.storages = {i: CheckedStorage() for i in self.ids}
        self.machines: dict[int, CheckedMachine] = {}
        self.nodes: dict[int, RaftNode] = {}
        for i in self.ids:
            self.start(i)

    def start(self, i: int, join: bool = False) -> RaftNode:
        """Start node `i` over its storage (a new, empty one for an id never seen)."""
        self.storages.setdefault(i, CheckedStorage())
        t = CheckedTransport(self.hub, i)
        self.hub._transports[i] = t
        t.storage, t.violations = self.storages[i], self.violations
        t.inline_delivery = self.inline
        sm = CheckedMachine()
        sm.storage, sm.violations = self.storages[i], self.violations
        defaults: dict[str, object] = {"tick_interval": 0.01, "election_tick": 10, "seed": i}
        defaults.update(self.overrides)
        cfg = RaftNodeConfig(id=i, voters=self.ids, join=join, **defaults)  # type: ignore[arg-type]
        node = RaftNode(cfg, self.storages[i], t, sm)
        self.machines[i], self.nodes[i] = sm, node
        node.start()
        return node

    def leader(self) -> int | None:
        leaders = [
            i
            for i, n in self.nodes.items()
            if n.status().running and n.status().role is Role.LEADER
        ]
        if len(leaders) != 1:
            return None
        return leaders[0]

    def wait_leader(self, exclude: int | None = None) -> int:
        wait_for(lambda: self.leader() not in (None, exclude))
        lead = self.leader()
        assert lead is not None
        return lead

    def propose(self, data: bytes) -> object:
        """Propose at whoever leads, retrying on NotLeader until it lands."""
        deadline = time.monotonic() + WAIT
        while True:
            lead = self.wait_leader()
            try:
                return self.nodes[lead].propose(data).result(timeout=WAIT)
            except NotLeader:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def stop(self) -> None:
        for n in self.nodes.values():
            n.stop()
        self.hub.close()


@pytest.fixture(params=[False, True], ids=["queued", "inline"])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(inline=request.param)
    yield c
    c.stop()
    assert c.violations == []


def test_a_single_node_cluster_elects_itself_and_applies_a_proposal() -> None:
    c = Cluster(1)
    try:
        lead = c.wait_leader()
        assert lead == 1
        assert c.nodes[1].propose(put("a", "1")).result(timeout=WAIT) == 3
        assert c.machines[1].get("a") == "1"
    finally:
        c.stop()
    assert c.violations == []


def test_three_nodes_elect_one_leader_and_every_node_applies_every_write(
    cluster: Cluster,
) -> None:
    for i in range(20):
        cluster.propose(put(f"k{i}", str(i)))
    expected = {f"k{i}": str(i) for i in range(20)}
    wait_for(lambda: all(m.dump()["kv"] == expected for m in cluster.machines.values()))


def test_a_proposal_resolves_with_the_state_machines_result_for_its_index(
    cluster: Cluster,
) -> None:
    lead = cluster.wait_leader()
    futures = [cluster.nodes[lead].propose(put("k", str(i))) for i in range(10)]
    indexes = [f.result(timeout=WAIT) for f in futures]
    assert indexes == sorted(indexes) and len(set(indexes)) == 10
    assert cluster.nodes[lead].status().applied >= indexes[-1]


def test_a_follower_refuses_a_proposal_naming_the_leader_and_its_address(
    cluster: Cluster,
) -> None:
    lead = cluster.wait_leader()
    wait_for(lambda: all(n.status().leader_id == lead for n in cluster.nodes.values()))
    follower = next(i for i in cluster.ids if i != lead)
    with pytest.raises(NotLeader) as info:
        cluster.nodes[follower].propose(put("x", "y")).result(timeout=WAIT)
    assert info.value.leader_id == lead
    assert info.value.leader_address == f"memory:{lead}"


def test_an_isolated_leader_fails_its_pending_proposal_and_the_rest_elect_a_new_one(
    cluster: Cluster,
) -> None:
    old = cluster.wait_leader()
    cluster.propose(put("before", "1"))
    cluster.hub.isolate(old)
    fut = cluster.nodes[old].propose(put("lost", "1"))
    with pytest.raises(NotLeader):
        fut.result(timeout=WAIT)  # check-quorum: the leader steps down
    wait_for(lambda: any(
        cluster.nodes[i].status().role is Role.LEADER for i in cluster.ids if i != old
    ))  # fmt: skip
    cluster.hub.heal()
    cluster.propose(put("after", "1"))
    wait_for(lambda: all(m.get("after") == "1" for m in cluster.machines.values()))
    assert all(m.get("before") == "1" for m in cluster.machines.values())


def test_a_read_index_covers_every_write_acknowledged_before_it(cluster: Cluster) -> None:
    lead = cluster.wait_leader()
    index = cluster.nodes[lead].propose(put("r", "1")).result(timeout=WAIT)
    assert isinstance(index, int)
    read = cluster.nodes[lead].read_index().result(timeout=WAIT)
    assert read >= index
    assert cluster.machines[lead].get("r") == "1"


def test_a_read_index_at_a_follower_is_refused_with_the_leader(cluster: Cluster) -> None:
    lead = cluster.wait_leader()
    wait_for(lambda: all(n.status().leader_id == lead for n in cluster.nodes.values()))
    follower = next(i for i in cluster.ids if i != lead)
    with pytest.raises(NotLeader):
        cluster.nodes[follower].read_index().result(timeout=WAIT)


def test_snapshots_compact_the_log_and_a_restarted_node_recovers_its_state() -> None:
    c = Cluster(snapshot_entries=8, compact_keep=2)
    try:
        for i in range(40):
            c.propose(put(f"k{i % 7}", str(i)))
        expected = c.machines[c.wait_leader()].dump()["kv"]
        wait_for(lambda: all(m.dump()["kv"] == expected for m in c.machines.values()))
        for i in c.ids:
            assert c.storages[i].snapshot().metadata.index > 30
            assert c.storages[i].first_index() > 20
        victim = 1
        c.nodes[victim].stop()
        snap_index = c.storages[victim].snapshot().metadata.index
        c.start(victim)  # same storage, new state machine: restored from the snapshot
        assert c.machines[victim].applied >= snap_index
        wait_for(lambda: c.machines[victim].dump()["kv"] == expected)
    finally:
        c.stop()
    assert c.violations == []


def test_a_node_that_fell_behind_the_compacted_log_catches_up_by_snapshot() -> None:
    c = Cluster(snapshot_entries=5, compact_keep=0)
    try:
        lead = c.wait_leader()
        lagger = next(i for i in c.ids if i != lead)
        c.hub.isolate(lagger)
        for i in range(30):
            c.propose(put(f"k{i}", str(i)))
        lead = c.wait_leader(exclude=lagger)
        assert c.storages[lead].first_index() > c.machines[lagger].applied + 1
        c.hub.heal()
        expected = {f"k{i}": str(i) for i in range(30)}
        wait_for(lambda: c.machines[lagger].dump()["kv"] == expected)
    finally:
        c.stop()
    assert c.violations == []


def test_a_stopped_node_fails_new_and_pending_requests_with_node_stopped() -> None:
    c = Cluster(1)
    try:
        c.wait_leader()
        c.nodes[1].stop()
        with pytest.raises(NodeStopped):
            c.nodes[1].propose(put("a", "1")).result(timeout=WAIT)
        with pytest.raises(NodeStopped):
            c.nodes[1].read_index().result(timeout=WAIT)
        assert not c.nodes[1].status().running
    finally:
        c.stop()


class Exploding(KvStateMachine):
    def apply(self, index: int, data: bytes) -> object:
        if data == b"boom":
            raise ValueError("rejected command")
        return super().apply(index, data)


def test_a_command_the_state_machine_rejects_fails_only_its_own_future() -> None:
    hub = InMemoryRaftHub()
    sm = Exploding()
    assert isinstance(sm, StateMachine)
    node = RaftNode(
        RaftNodeConfig(id=1, voters=(1,), tick_interval=0.01),
        InMemoryRaftStorage(),
        hub.transport(1),
        sm,
    )
    node.start()
    try:
        wait_for(lambda: node.status().role is Role.LEADER)
        bad: Future[object] = node.propose(b"boom")
        with pytest.raises(ValueError, match="rejected"):
            bad.result(timeout=WAIT)
        assert node.propose(put("a", "1")).result(timeout=WAIT) == 4
    finally:
        node.stop()
        hub.close()


def test_leadership_can_be_transferred_to_a_named_follower(cluster: Cluster) -> None:
    lead = cluster.wait_leader()
    target = next(i for i in cluster.ids if i != lead)
    wait_for(lambda: cluster.nodes[target].status().leader_id == lead)
    deadline = time.monotonic() + WAIT
    while cluster.leader() != target:  # best effort: retried until it lands
        assert time.monotonic() < deadline, "leadership never moved"
        cluster.nodes[target].transfer_leadership(target)  # forwarded to the leader
        time.sleep(0.2)
    cluster.propose(put("moved", "1"))
    wait_for(lambda: all(m.get("moved") == "1" for m in cluster.machines.values()))


def test_a_commit_index_held_back_from_the_disk_is_written_on_stop() -> None:
    c = Cluster()
    try:
        for i in range(10):
            c.propose(put(f"k{i}", "v"))
        lead = c.wait_leader()
        commit = c.nodes[lead].status().commit
        wait_for(lambda: all(n.status().applied >= commit for n in c.nodes.values()))
    finally:
        c.stop()
    # a commit move alone is not written at once (volatile state); stop writes the last one
    assert all(s.hard_state.commit >= commit for s in c.storages.values())
    assert c.violations == []
