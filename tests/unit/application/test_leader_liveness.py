"""Replicated, the leader judges node liveness from heartbeats it holds in memory and commits
only the verdicts that change a node: a heartbeat of a READY node commits nothing, a silent
node goes SUSPECT then DOWN, a SUSPECT node that beats again is READY, and a newly elected
leader gives every node a fresh grace period (no mass DOWN after a failover). And no lock is
held while a proposal waits for its commit."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest

from gpu_platform.adapters.outbound.sim.inventory import build_node
from gpu_platform.application.control_plane import ControlPlane
from gpu_platform.domain.cluster_state import CheckNodes, NodeHeartbeat, RegisterNode
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Inventory, NodeState
from gpu_platform.testing.fakes import (
    FakeJobRunner,
    InMemoryJobStore,
    ManualClock,
    RecordingPublisher,
    SequentialJobIds,
)
from gpu_platform.testing.solo_replication import SoloReplication

POLICY = FaultPolicy(node_suspect_after_s=10, node_down_after_s=30)
T0 = 1_000.0


class Leader:
    def __init__(self) -> None:
        self.clock = ManualClock(0.0)
        self.log = SoloReplication(POLICY)
        for name in ("n0", "n1"):  # registered by an earlier leader, long ago
            self.log.submit(RegisterNode(build_node(name, 2), 0.0))
        self.clock.advance(T0)
        self.plane = ControlPlane(
            Inventory((), source="replicated", simulated=False),
            InMemoryJobStore(),
            FakeJobRunner(),
            self.clock,
            SequentialJobIds(),
            RecordingPublisher(),
            replication=cast(Any, self.log),
            fault_policy=POLICY,
            schedule_interval_s=0.01,
            server_addresses=("http://127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"),
        )
        self.plane.start()
        deadline = time.monotonic() + 10
        while self.plane.accepting() is not None:  # until the loop has taken the lead
            assert time.monotonic() < deadline, "the control plane never took the lead"
            time.sleep(0.01)

    def at(self, t: float) -> None:
        self.clock.advance(T0 + t - self.clock.now())

    def states(self) -> dict[str, NodeState]:
        return {n.name: n.state for n in self.log.state.nodes}

    def committed(self, kind: type) -> int:
        return sum(1 for c in self.log.commands if isinstance(c, kind))


@pytest.fixture
def leader() -> Iterator[Leader]:
    rig = Leader()
    yield rig
    rig.plane.shutdown()


def test_a_new_leader_judges_no_node_before_a_fresh_grace_period(leader: Leader) -> None:
    # the committed heartbeats are 1,000 s old: judged by them, both nodes would be DOWN
    leader.plane.check_nodes()
    leader.at(9.0)
    leader.plane.check_nodes()
    assert leader.states() == {"n0": NodeState.READY, "n1": NodeState.READY}
    assert leader.committed(CheckNodes) == 0


def test_a_silent_node_goes_suspect_then_down_and_heartbeats_commit_nothing(
    leader: Leader,
) -> None:
    for t in (5.0, 9.0, 15.0, 25.0, 35.0, 45.0):  # n0 beats steadily; n1 never does
        leader.at(t)
        leader.plane.agent_heartbeat("n0")
        leader.plane.check_nodes()
        if t == 15.0:
            assert leader.states() == {"n0": NodeState.READY, "n1": NodeState.SUSPECT}
    assert leader.states() == {"n0": NodeState.READY, "n1": NodeState.DOWN}
    assert leader.committed(NodeHeartbeat) == 0  # READY's heartbeats stay in memory
    assert leader.committed(CheckNodes) == 2  # one per change of state: SUSPECT, DOWN


def test_a_suspect_node_that_beats_again_is_ready_with_one_commit(leader: Leader) -> None:
    leader.at(12.0)
    leader.plane.check_nodes()
    assert leader.states()["n1"] is NodeState.SUSPECT
    for t in (13.0, 13.5, 14.0):
        leader.at(t)
        leader.plane.agent_heartbeat("n1")
    assert leader.states()["n1"] is NodeState.READY
    assert leader.committed(NodeHeartbeat) == 1


def test_a_submit_waiting_for_its_commit_holds_no_lock(leader: Leader) -> None:
    """Applying is separate from acknowledging: while one submit waits for its commit,
    other calls read and propose, and the waiting submit returns once it is applied."""
    leader.log.defer = True
    done: list[str] = []
    waiter = threading.Thread(
        target=lambda: done.append(leader.plane.submit(JobSpec(("true",), gpus=0)).id)
    )
    waiter.start()
    deadline = time.monotonic() + 10
    while leader.log.deferred == 0:
        assert time.monotonic() < deadline, "the submit never proposed"
        time.sleep(0.01)
    reader = threading.Thread(target=lambda: done.append(str(len(leader.plane.list_jobs()))))
    reader.start()
    reader.join(timeout=10)
    assert done == ["0"], "a read was blocked behind a commit wait"
    leader.log.defer = False
    leader.log.commit_deferred()
    waiter.join(timeout=10)
    assert done[1:] and leader.plane.get(done[1]).state is not None
