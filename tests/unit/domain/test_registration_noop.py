"""`registration_changes_nothing`: an agent's hello after an election is a heartbeat when its
node is READY and unchanged (issue 21: 128 agents re-registering after each election wrote
~1.6 MB of RegisterNode entries)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_platform.domain.cluster_state import BindJob, ClusterState, RegisterNode, SubmitJob
from gpu_platform.domain.faults.policy import FaultPolicy
from gpu_platform.domain.membership import registration_changes_nothing
from gpu_platform.domain.model.gpu import Gpu, Vendor
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Node, NodeState

POLICY = FaultPolicy(node_suspect_after_s=5, node_down_after_s=12)


def node(name: str = "n0", uuids: tuple[str, ...] = ("A", "B"), **kw: object) -> Node:
    gpus = tuple(
        Gpu(u, i, name, Vendor.NVIDIA, "A100", 80 << 30, numa_node=0) for i, u in enumerate(uuids)
    )
    return Node(name, gpus, **kw)  # type: ignore[arg-type]


def busy_state() -> ClusterState:
    """n0 registered, one of its GPUs held by a job."""
    state = ClusterState.empty(POLICY)
    state.apply(RegisterNode(node(labels=(("rack", "r1"),)), 0.0))
    state.apply(SubmitJob("j", JobSpec(("x",), gpus=1), 1.0))
    state.apply(BindJob("j", "n0", (0,), 2.0))
    return state


def test_the_same_report_from_a_ready_nodes_agent_changes_nothing_when_applied() -> None:
    state = busy_state()
    before = state.node("n0")
    report = node(labels=(("rack", "r1"),))
    assert registration_changes_nothing(before, report)
    state.apply(RegisterNode(report, 3.0))
    assert state.node("n0") == before


@pytest.mark.parametrize(
    "report",
    [
        node(labels=(("rack", "r2"),)),  # a new description
        node(uuids=("A", "C"), labels=(("rack", "r1"),)),  # other GPUs
        node(labels=(("rack", "r1"),), memory_bytes=1 << 30),
    ],
    ids=["labels", "gpus", "memory"],
)
def test_a_changed_report_is_registered(report: Node) -> None:
    state = busy_state()
    before = state.node("n0")
    assert not registration_changes_nothing(before, report)


def test_an_unknown_or_not_ready_node_is_registered() -> None:
    report = node(labels=(("rack", "r1"),))
    assert not registration_changes_nothing(None, report)
    stored = busy_state().node("n0")
    for st in (NodeState.SUSPECT, NodeState.DOWN):
        assert not registration_changes_nothing(replace(stored, state=st), report)
