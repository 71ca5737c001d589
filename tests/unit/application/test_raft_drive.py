"""A proposer that drives its own commit (`RaftNode.drive`, `Applier.help`): the sole voter
appends, writes and applies a proposal on the proposer's thread; with peers, or with the
applier busy, the Raft loop's and the applier's threads are woken instead, and nothing is
applied twice, out of order, or before it is durable."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future

import pytest

from gpu_platform.application.raft_applier import Applier, Committed
from gpu_platform.application.raft_errors import NotLeader
from gpu_platform.application.raft_node import RaftNode, RaftNodeConfig
from gpu_platform.application.raft_proposals import PendingProposals
from gpu_platform.domain.consensus import ConfState, Entry, Role
from gpu_platform.ports.outbound.metrics import NoRaftMetrics
from gpu_platform.testing.raft_fakes import InMemoryRaftHub, InMemoryRaftStorage
from gpu_platform.testing.raft_kv import KvStateMachine

WAIT = 30.0  # generous: the machine is shared; never a timing assert


class ThreadedMachine(KvStateMachine):
    """Records which thread applied each index, and any index applied out of order or before
    its entry was durable."""

    def __init__(self, storage: InMemoryRaftStorage) -> None:
        super().__init__()
        self.storage = storage
        self.threads: dict[int, str] = {}
        self.violations: list[str] = []

    def apply(self, index: int, data: bytes) -> object:
        if self.threads and index <= max(self.threads):
            self.violations.append(f"applied {index} after {max(self.threads)}")
        if self.storage.last_index() < index:
            self.violations.append(f"applied {index} before it was durable")
        self.threads[index] = threading.current_thread().name
        return super().apply(index, data)


def put(key: str, value: str) -> bytes:
    return json.dumps({"key": key, "value": value}).encode()


def _wait(cond: Callable[[], bool], timeout: float = WAIT) -> None:
    done = threading.Event()
    deadline = threading.Timer(timeout, done.set)
    deadline.start()
    try:
        while not done.is_set():
            if cond():
                return
            done.wait(0.005)
        raise AssertionError("condition not met in time")
    finally:
        deadline.cancel()


@pytest.fixture
def sole() -> Iterator[tuple[RaftNode, ThreadedMachine]]:
    """A sole voter whose loop thread wakes only when woken (ticks an hour apart)."""
    hub, storage = InMemoryRaftHub(), InMemoryRaftStorage()
    machine = ThreadedMachine(storage)
    node = RaftNode(RaftNodeConfig(id=1, voters=(1,), tick_interval=3600.0), storage,
                    hub.transport(1), machine)  # fmt: skip
    node.start()
    _wait(lambda: node.status().role is Role.LEADER)
    _wait(lambda: node.status().applied >= node.status().commit)
    yield node, machine
    node.stop()
    hub.close()
    assert machine.violations == []


def test_a_sole_voters_proposer_commits_and_applies_its_proposals_on_its_own_thread(
    sole: tuple[RaftNode, ThreadedMachine],
) -> None:
    node, machine = sole
    futures = [node.propose(put(f"k{i}", "v"), driven=True) for i in range(5)]
    node.drive()
    assert all(f.done() for f in futures)  # no thread was waited for
    indexes = [f.result() for f in futures]
    assert indexes == list(range(indexes[0], indexes[0] + 5))
    assert {machine.threads[i] for i in indexes} == {threading.current_thread().name}
    assert machine.get("k4") == "v"


def test_proposers_driving_at_once_each_get_their_own_entry_applied_once_in_order(
    sole: tuple[RaftNode, ThreadedMachine],
) -> None:
    node, machine = sole
    results: dict[tuple[int, int], object] = {}

    def proposer(p: int) -> None:
        for i in range(25):
            fut = node.propose(put(f"p{p}-{i}", str(i)), driven=True)
            node.drive()
            results[(p, i)] = fut.result(timeout=WAIT)

    threads = [threading.Thread(target=proposer, args=(p,)) for p in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert len(results) == 200
    assert len(set(results.values())) == 200  # every proposal its own index
    assert all(machine.get(f"p{p}-{i}") == str(i) for p, i in results)


def test_with_peers_a_driven_proposal_is_committed_by_the_raft_loop() -> None:
    hub = InMemoryRaftHub()
    ids = (1, 2, 3)
    storages = {i: InMemoryRaftStorage() for i in ids}
    machines = {i: ThreadedMachine(storages[i]) for i in ids}
    nodes = {
        i: RaftNode(
            RaftNodeConfig(id=i, voters=ids, tick_interval=0.01, seed=i),
            storages[i],
            hub.transport(i),
            machines[i],
        )
        for i in ids
    }
    for n in nodes.values():
        n.start()
    try:
        index = None
        while index is None:
            _wait(lambda: any(n.status().role is Role.LEADER for n in nodes.values()))
            lead = next(i for i, n in nodes.items() if n.status().role is Role.LEADER)
            try:
                fut = nodes[lead].propose(put("a", "1"), driven=True)
                nodes[lead].drive()
                index = fut.result(timeout=WAIT)
            except NotLeader:
                continue
        assert isinstance(index, int)
        assert machines[lead].threads[index] != threading.current_thread().name
        _wait(lambda: all(m.get("a") == "1" for m in machines.values()))
    finally:
        for n in nodes.values():
            n.stop()
        hub.close()
    assert all(m.violations == [] for m in machines.values())


class GatedMachine(KvStateMachine):
    """Blocks applying index 1 until `gate` is set; records the applying thread per index."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.threads: dict[int, str] = {}

    def apply(self, index: int, data: bytes) -> object:
        if index == 1:
            self.gate.wait(WAIT)
        self.threads[index] = threading.current_thread().name
        return index


def _entry(index: int) -> Committed:
    return Committed((Entry(1, index, data=put("x", str(index))),), ConfState(voters=(1,)))


def test_help_while_the_applier_thread_is_busy_leaves_the_entry_to_it_and_wakes_it() -> None:
    machine = GatedMachine()
    proposals = PendingProposals()
    applier = Applier(1, machine, proposals, NoRaftMetrics(), applied=0, snapshot_entries=0,
                      header=lambda cs: b"", on_snapshot=lambda made: None,
                      lost=lambda: NotLeader(None, None))  # fmt: skip
    applier.start()
    try:
        applier.submit(_entry(1))  # the thread takes it and waits at the gate
        _wait(applier._lock.locked)
        second: Future[object] = Future()
        proposals.add(2, 1, second, 0.0)
        applier.driver = threading.get_ident()
        applier.submit(_entry(2))  # wakes nobody: this thread helps next
        applier.driver = None
        applier.help()  # the apply lock is held: the thread is woken instead
        assert not second.done()
        machine.gate.set()
        assert second.result(timeout=WAIT) == 2
        assert machine.threads == {1: "raft-apply-1", 2: "raft-apply-1"}
    finally:
        machine.gate.set()
        applier.stop()


def test_help_applies_up_to_a_stop_and_leaves_the_stop_to_the_applier_thread() -> None:
    machine = GatedMachine()
    machine.gate.set()
    applier = Applier(1, machine, PendingProposals(), NoRaftMetrics(), applied=0,
                      snapshot_entries=0, header=lambda cs: b"", on_snapshot=lambda made: None,
                      lost=lambda: NotLeader(None, None))  # fmt: skip
    applier.driver = threading.get_ident()  # nothing below wakes the thread (not started)
    applier.submit(_entry(1))
    applier._items.append(None)  # a stop queued behind it
    applier.submit(_entry(2))
    applier.help()
    assert machine.threads == {1: threading.current_thread().name}
    applier.driver = None
    applier.start()
    applier._thread.join(WAIT)  # type: ignore[union-attr]
    assert not applier._thread.is_alive()  # type: ignore[union-attr]
    assert 2 not in machine.threads  # submitted after the stop: never applied
