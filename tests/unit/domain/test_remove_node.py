"""An operator removes a node that holds no work; a busy or unknown node is refused."""

from __future__ import annotations

import pytest

from gpu_platform.adapters.outbound.sim import default_node
from gpu_platform.domain.cluster_state import (
    BindJob,
    ClusterState,
    FinishJob,
    RegisterNode,
    RemoveNode,
    StartJob,
    SubmitJob,
)
from gpu_platform.domain.errors import Conflict, NotFound
from gpu_platform.domain.events import JobBound, NodeRemoved
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Inventory

N = "node-0"


def cluster() -> ClusterState:
    return ClusterState(Inventory((default_node(),), source="sim", simulated=True))


def test_a_node_with_a_running_job_cannot_be_removed_until_the_job_has_ended() -> None:
    state = cluster()
    state.apply(SubmitJob("j", JobSpec(("true",), gpus=2), 1.0))
    (bound,) = state.apply(BindJob("j", N, (0, 1), 1.0))
    assert isinstance(bound, JobBound)
    state.apply(StartJob("j", bound.allocation.epoch, 1.0))
    with pytest.raises(Conflict, match="holds work \\(job j\\)"):
        state.apply(RemoveNode(N, "retired", 2.0))
    state.apply(FinishJob("j", bound.allocation.epoch, 0, 3.0))
    assert state.apply(RemoveNode(N, "retired", 4.0)) == [NodeRemoved(N, "retired")]
    assert state.nodes == () or all(n.name != N for n in state.nodes)
    state.check_invariants()


def test_an_unknown_node_is_not_found() -> None:
    with pytest.raises(NotFound):
        cluster().apply(RemoveNode("nowhere", "typo", 1.0))


def test_a_removed_node_can_register_again() -> None:
    state = cluster()
    node = state.node(N)
    state.apply(RemoveNode(N, "stray", 1.0))
    state.apply(RegisterNode(node, 2.0))
    assert state.node(N).name == N
    state.check_invariants()
