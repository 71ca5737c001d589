"""The applier (`raft_applier`): committed entries applied in log order, exactly once, on its
own thread, across snapshots taken and restored; each snapshot is the state at its index."""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.application.raft_applier import (
    Applier,
    Committed,
    LeadershipLost,
    MadeSnapshot,
    ReadWait,
    Restore,
)
from gpu_platform.application.raft_errors import NotLeader
from gpu_platform.application.raft_proposals import PendingProposals
from gpu_platform.domain.consensus import ConfState, Entry
from gpu_platform.ports.outbound.metrics import NoRaftMetrics

CONF = ConfState(voters=(1, 2, 3))
STALE = ConfState(voters=(1, 2))
WAIT = 30.0


class OrderedMachine:
    """Its state is the list of indexes applied; an index not above the last one (out of
    order, or twice) is recorded as a violation. Empty entries never reach it."""

    def __init__(self) -> None:
        self.indexes: list[int] = []
        self.violations: list[str] = []
        self.apply_threads: set[str] = set()

    def apply(self, index: int, data: bytes) -> object:
        self.apply_threads.add(threading.current_thread().name)
        last = self.indexes[-1] if self.indexes else 0
        if index <= last:
            self.violations.append(f"applied {index} after {last}")
        self.indexes.append(index)
        return ("applied", index)

    def snapshot(self) -> bytes:
        return json.dumps(self.indexes).encode()

    def restore(self, data: bytes) -> None:
        self.indexes = json.loads(data) if data else []


def _applier(machine: OrderedMachine, made: list[MadeSnapshot], every: int) -> Applier:
    return Applier(
        1,
        machine,
        PendingProposals(),
        NoRaftMetrics(),
        applied=0,
        snapshot_entries=every,
        header=lambda cs: b"H",
        on_snapshot=made.append,
        lost=lambda: NotLeader(None, None),
    )


# A schedule: ("entries", n) commits n more entries, one of them the leader's empty entry when
# `empty`; ("restore", k) installs a leader's snapshot k entries past the last committed one.
step = st.one_of(
    st.tuples(st.just("entries"), st.integers(1, 6), st.booleans()),
    st.tuples(st.just("restore"), st.integers(0, 5), st.just(False)),
)


@settings(max_examples=60, deadline=None)
@given(schedule=st.lists(step, min_size=1, max_size=25), every=st.integers(0, 7))
def test_entries_are_applied_in_order_exactly_once_across_snapshots_taken_and_restored(
    schedule: list[tuple[str, int, bool]], every: int
) -> None:
    machine, made = OrderedMachine(), []
    applier = _applier(machine, made, every)
    proposals: dict[int, Future[object]] = {}
    no_ops: set[int] = set()
    restored_to = 0
    last = 0

    def upto(index: int) -> list[int]:
        return [i for i in range(1, index + 1) if i not in no_ops]

    applier.start()
    for kind, n, empty in schedule:
        if kind == "entries":
            entries = []
            for k in range(n):
                last += 1
                data = b"" if empty and k == 0 else b"cmd%d" % last
                if not data:
                    no_ops.add(last)
                entries.append(Entry(term=1, index=last, data=data))
                fut: Future[object] = Future()
                applier.proposals.add(last, 1, fut, 0.0)
                proposals[last] = fut
            # a batch may overlap what a restored snapshot already covers: skipped, not again
            again = [
                Entry(1, i, data=b"old") for i in range(max(1, restored_to - 1), restored_to + 1)
            ]
            applier.submit(Committed(tuple(again + entries), CONF))
        else:
            last += n
            restored_to = last
            applier.submit(Restore(last, json.dumps(upto(last)).encode()))
            # a batch the snapshot covered entirely (with an older configuration): no effect
            applier.submit(Committed((Entry(1, last, data=b"old"),), STALE, snapshot_now=True))
    reads = [Future[int]() for _ in range(2)]
    applier.submit(ReadWait(last, reads[0]))
    applier.submit(ReadWait(last + 1, reads[1]))  # never reached: fails on stop
    applier.stop(timeout=WAIT)

    assert machine.violations == []
    assert machine.indexes == upto(last)
    assert applier.applied == last
    assert machine.apply_threads <= {"raft-apply-1"}
    for index, fut in proposals.items():  # each settled once, with its own entry's result
        assert fut.result(timeout=0) == (None if index in no_ops else ("applied", index))
    assert all(snap.conf_state == CONF for snap in made)
    for snap in made:  # each snapshot is the state at exactly its index
        assert b"".join(snap.pieces()) == b"H" + json.dumps(upto(snap.index)).encode()
        snap.close()
    if every:
        indexes = [s.index for s in made]
        assert indexes == sorted(set(indexes))
    else:
        assert made == []
    assert reads[0].result(timeout=WAIT) == last
    assert isinstance(reads[1].exception(timeout=WAIT), Exception)


def test_a_lost_leadership_fails_only_the_proposals_the_entries_before_it_did_not_settle() -> None:
    machine, made = OrderedMachine(), []
    applier = _applier(machine, made, 0)
    futures = {i: Future[object]() for i in (1, 2, 3)}
    for i, fut in futures.items():
        applier.proposals.add(i, 4, fut, 0.0)
    later: Future[object] = Future()
    applier.proposals.add(4, 6, later, 0.0)  # proposed while leading a later term
    applier.start()
    applier.submit(Committed((Entry(4, 1, data=b"a"), Entry(4, 2, data=b"b")), CONF))
    applier.submit(LeadershipLost(4, NotLeader(2, "h:1")))
    applier.stop(timeout=WAIT)
    assert futures[1].result() == ("applied", 1)
    assert futures[2].result() == ("applied", 2)
    assert isinstance(futures[3].exception(), NotLeader)
    assert not later.done()


def test_an_entry_of_another_term_at_a_proposals_index_fails_that_proposal() -> None:
    machine, made = OrderedMachine(), []
    applier = _applier(machine, made, 0)
    fut: Future[object] = Future()
    applier.proposals.add(1, 2, fut, 0.0)
    applier.start()
    applier.submit(Committed((Entry(3, 1, data=b"x"),), CONF))
    applier.stop(timeout=WAIT)
    assert machine.indexes == [1]
    assert isinstance(fut.exception(), NotLeader)
