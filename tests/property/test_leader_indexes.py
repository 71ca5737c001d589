"""The leader's incremental structures against brute-force oracles, under any sequence of
cluster commands (binds, frees, faults, admin actions, re-registrations, heartbeats).

* the placement view kept in step (`LiveView.sync`) equals a view rebuilt from scratch, for
  any set of nodes whose agents can launch;
* the RESETTING-GPU index gives what a scan of every GPU gives (`resets_due`);
* the open-job index equals a scan of every job (`check_invariants` asserts both indexes).
"""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_platform.adapters.outbound.sim.inventory import build_node
from gpu_platform.domain.cluster_state import (
    BindJob,
    ClusterState,
    Command,
    FinishJob,
    RegisterNode,
    RequeueJob,
    SubmitJob,
)
from gpu_platform.domain.errors import DomainError
from gpu_platform.domain.model.gpu import GpuState
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Inventory, NodeState
from gpu_platform.domain.scheduling.live_view import LiveView, rebuild, view_contents
from gpu_platform.testing.cluster_commands import cluster_commands
from gpu_platform.testing.strategies import described_nodes

NODES = ("n0", "n1", "n2")


def _state() -> ClusterState:
    nodes = [
        build_node(n, 4, numa_nodes=2, labels={"rack": f"r{i % 2}"}) for i, n in enumerate(NODES)
    ]
    return ClusterState(Inventory(tuple(nodes), source="test", simulated=True))


def _resets_by_scan(state: ClusterState) -> set[str]:
    return {
        g.uuid
        for n in state.nodes
        for g in n.gpus
        if g.state is GpuState.RESETTING and state.holder(g) is None
    }


def _apply(state: ClusterState, command: Command) -> None:
    with contextlib.suppress(DomainError):
        state.apply(command)


def _directed(state: ClusterState, data: st.DataObject, n: int) -> Command:
    """A command likely to be accepted: submit and bind on free GPUs, end or stop a job."""
    kind = data.draw(st.sampled_from(["bind", "end", "stop", "random"]))
    holding = [j for j in state.open_jobs() if j.holds_gpus and j.allocation is not None]
    if kind == "bind":
        present = {node.name for node in state.nodes}  # RemoveNode may have taken some
        free = {name: sorted(state.free_gpus(name)) for name in NODES if name in present}
        free = {name: gpus for name, gpus in free.items() if gpus and _ready(state, name)}
        if free:
            name = data.draw(st.sampled_from(sorted(free)))
            gpus = data.draw(st.integers(1, len(free[name])))
            job_id = f"b{n}"
            spec = JobSpec(command=("x",), gpus=gpus)
            _apply(state, SubmitJob(job_id, spec, float(n)))
            return BindJob(job_id, name, tuple(free[name][:gpus]), float(n))
    if kind in ("end", "stop") and holding:
        job = data.draw(st.sampled_from(holding))
        assert job.allocation is not None
        if kind == "end":
            return FinishJob(job.id, job.allocation.epoch, 0, float(n))
        return RequeueJob(job.id, job.allocation.epoch, float(n), "preempted")
    return data.draw(cluster_commands(NODES))


def _ready(state: ClusterState, name: str) -> bool:
    return state.node(name).state is NodeState.READY


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_view_kept_in_step_equals_a_view_rebuilt_from_scratch(data: st.DataObject) -> None:
    state = _state()
    live = LiveView()
    live.sync(state, None)
    for n in range(data.draw(st.integers(1, 40))):
        _apply(state, _directed(state, data, n))
        state.check_invariants()  # the RESETTING and open-job indexes equal full scans
        assert {g.uuid for g in state.resets_due()} == _resets_by_scan(state)
        if data.draw(st.booleans()):
            usable = data.draw(st.none() | st.frozensets(st.sampled_from(NODES)))
            view = live.sync(state, usable)
            view.check_invariants()
            assert view_contents(view) == view_contents(rebuild(state, usable))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_re_registered_nodes_of_any_shape_are_re_indexed(data: st.DataObject) -> None:
    state = _state()
    live = LiveView()
    live.sync(state)
    for _ in range(data.draw(st.integers(1, 4))):
        name = data.draw(st.sampled_from(NODES))
        _apply(state, RegisterNode(data.draw(described_nodes(name)), 0.0))
        _apply(state, data.draw(cluster_commands(NODES)))
        assert view_contents(live.sync(state)) == view_contents(rebuild(state))


def test_a_new_state_object_is_indexed_whole() -> None:
    live = LiveView()
    first = _state()
    live.sync(first)
    second = ClusterState(Inventory((build_node("other", 2),), source="test", simulated=True))
    assert set(live.sync(second).slots) == {"other"}
