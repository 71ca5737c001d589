"""Group commit: a batch of proposals, each with its own index and result, in order."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_platform.application.raft_node import NodeStopped, RaftNode, RaftNodeConfig
from gpu_platform.application.raft_proposals import PendingProposals, ProposalBatch
from gpu_platform.infrastructure.config import Settings
from gpu_platform.testing.raft_fakes import (
    HeldRaftStorage,
    InMemoryRaftHub,
    InMemoryRaftTransport,
)

WAIT = 30.0  # generous: the machine is shared; never a timing assert
LOST = RuntimeError("lost")

outcomes = st.lists(st.one_of(st.integers(), st.builds(ValueError, st.text(max_size=5))))


@given(outcomes, st.integers(min_value=0, max_value=10_000), st.integers(1, 50))
def test_each_proposal_of_a_batch_gets_its_own_index_and_result_in_order(
    results: list[object], before: int, term: int
) -> None:
    batch = ProposalBatch()
    futures: list[Future[object]] = [Future() for _ in results]
    for i, fut in enumerate(futures):
        batch.add(b"p%d" % i, fut, float(i))
    last = before + len(results)
    assert list(batch.indexes(last)) == list(range(before + 1, last + 1))
    pending = PendingProposals()
    pending.add_batch(batch, last, term)
    assert len(batch) == 0 and len(pending) == len(results)
    for index, outcome in zip(range(before + 1, last + 1), results, strict=True):
        error = outcome if isinstance(outcome, Exception) else None
        at = pending.resolve(index, term, None if error else outcome, error, LOST)
        assert at == float(index - before - 1)  # the proposal queued at that position
    for fut, outcome in zip(futures, results, strict=True):
        if isinstance(outcome, Exception):
            assert fut.exception() is outcome
        else:
            assert fut.result() == outcome
    assert len(pending) == 0


@given(st.integers(1, 30), st.integers(1, 30))
def test_an_entry_of_another_term_at_a_proposals_index_fails_it_as_lost(n: int, term: int) -> None:
    batch = ProposalBatch()
    futures: list[Future[object]] = [Future() for _ in range(n)]
    for fut in futures:
        batch.add(b"x", fut, 0.0)
    pending = PendingProposals()
    pending.add_batch(batch, n, term)
    for index in range(1, n + 1):
        assert pending.resolve(index, term + 1, "other", None, LOST) is None
    assert all(f.exception() is LOST for f in futures)


def test_the_lost_error_is_built_only_for_a_proposal_that_was_lost() -> None:
    made: list[Exception] = []

    def lost() -> Exception:
        made.append(RuntimeError("lost"))
        return made[-1]

    batch = ProposalBatch()
    kept: Future[object] = Future()
    overwritten: Future[object] = Future()
    batch.add(b"a", kept, 0.0)
    batch.add(b"b", overwritten, 0.0)
    pending = PendingProposals()
    pending.add_batch(batch, 2, 5)
    pending.resolve(1, 5, "ok", None, lost)
    assert kept.result() == "ok" and made == []
    pending.resolve(2, 6, "other", None, lost)
    assert len(made) == 1 and overwritten.exception() is made[0]


@given(st.integers(0, 40))
def test_a_batch_that_cannot_be_appended_fails_every_future_in_it(n: int) -> None:
    batch = ProposalBatch()
    futures: list[Future[object]] = [Future() for _ in range(n)]
    for fut in futures:
        batch.add(b"x", fut, 0.0)
    batch.fail(LOST)
    assert len(batch) == 0
    assert all(f.exception() is LOST for f in futures)


class RecordingMachine:
    """Applies by recording (index, data); the first apply waits until `release` is set."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def apply(self, index: int, data: bytes) -> object:
        self.entered.set()
        assert self.release.wait(WAIT)
        self.applied.append((index, data))
        return (index, data)

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        self.applied = []


class CountingStorage(HeldRaftStorage):
    """Records the entries of every write; fails every write once `broken` is set; the write
    of an entry b"first" waits until `release` is set when `hold` is."""

    def __init__(self) -> None:
        super().__init__(b"first", WAIT)


def applied(fut: Future[object]) -> tuple[int, bytes]:
    got = fut.result(timeout=WAIT)
    assert isinstance(got, tuple)
    return got


def single_voter(storage: CountingStorage, machine: RecordingMachine) -> RaftNode:
    hub = InMemoryRaftHub()
    transport = InMemoryRaftTransport(hub, 1)
    hub._transports[1] = transport
    node = RaftNode(
        RaftNodeConfig(id=1, voters=(1,), tick_interval=0.01, seed=1), storage, transport, machine
    )
    node.start()
    return node


def test_proposals_queued_while_the_loop_is_busy_are_written_once_each_with_its_own_result() -> (
    None
):
    storage, machine = CountingStorage(), RecordingMachine()
    machine.release.set()  # applying runs beside the loop: hold the loop in its write instead
    storage.hold = True
    node = single_voter(storage, machine)
    try:
        first = node.propose(b"first")
        assert storage.entered.wait(WAIT)  # the loop is now inside the write of "first"
        writes_before = len(storage.writes)
        clients = 8
        per_client = 25
        futures: dict[int, list[Future[object]]] = {}

        def client(c: int) -> None:
            futures[c] = [node.propose(b"c%d-%d" % (c, k)) for k in range(per_client)]

        threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        storage.release.set()
        assert first.result(timeout=WAIT) is not None
        results = {c: [applied(f) for f in fs] for c, fs in futures.items()}
        # after the held write of "first", one write for all 200 proposals queued meanwhile
        assert storage.writes[writes_before + 1 :] == [clients * per_client]
        for c, got in results.items():
            assert [data for _, data in got] == [b"c%d-%d" % (c, k) for k in range(per_client)]
            indexes = [index for index, _ in got]
            assert indexes == sorted(indexes)  # each client's order is kept in the log
        every = sorted(index for got in results.values() for index, _ in got)
        assert every == list(range(every[0], every[0] + clients * per_client))
        assert machine.applied[-clients * per_client :] == sorted(
            pair for got in results.values() for pair in got
        )
    finally:
        storage.release.set()
        node.stop()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_batch_whose_write_fails_fails_every_future_in_it() -> None:
    storage, machine = CountingStorage(), RecordingMachine()
    node = single_voter(storage, machine)
    try:
        node.propose(b"first")
        assert machine.entered.wait(WAIT)
        storage.broken = True
        futures = [node.propose(b"p%d" % i) for i in range(50)]
        machine.release.set()
        for fut in futures:
            with pytest.raises(NodeStopped):
                fut.result(timeout=WAIT)
    finally:
        machine.release.set()
        node.stop()


def test_the_drivers_timing_defaults_are_the_servers() -> None:
    defaults = RaftNodeConfig(id=1, voters=(1,))
    fields = Settings.model_fields
    assert fields["raft_tick_seconds"].default == defaults.tick_interval
    assert fields["raft_election_ticks"].default == defaults.election_tick
