"""Spread groups (a service's replicas): a job avoids the nodes its group already holds, in
the engine (`GpuRequest.avoid_nodes`) and across a scheduling cycle (`GpuRequest.spread`), and
the preference never makes a job unschedulable."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model_codec import decode_spec, encode_spec
from gpu_platform.domain.placement import ClusterView, GangPlacement, GpuRequest, place
from gpu_platform.domain.placement.engine import place_task
from gpu_platform.domain.scheduling import PendingJob
from tests.unit.scheduling.helpers import cluster, job, run_cycle, start


def replica(id: str, group: str = "service:a/llm", gpus: int = 1) -> PendingJob:
    pending = job(id, gpus)
    return replace(pending, request=replace(pending.request, spread=group))


def test_a_task_takes_a_node_it_does_not_avoid_when_one_fits() -> None:
    view = ClusterView(cluster(3, gpus=4))
    best = place_task(GpuRequest(1), view)
    assert best is not None
    other = place_task(GpuRequest(1, avoid_nodes=frozenset({best.node})), view)
    assert other is not None and other.node != best.node


def test_an_avoided_node_is_taken_when_no_other_fits() -> None:
    view = ClusterView(cluster(2, gpus=2))
    task = place_task(GpuRequest(2), view)
    assert task is not None
    view.bind(task, 0, 0)  # the other node is full now
    again = place_task(GpuRequest(1, avoid_nodes=frozenset({"n0", "n1"})), view)
    assert again is not None  # a preference: both avoided, the free one is still used
    assert again.node != task.node


@settings(max_examples=40, deadline=None)
@given(
    free=st.lists(st.integers(0, 4), min_size=1, max_size=6),
    avoid=st.sets(st.integers(0, 5)),
    gpus=st.integers(1, 4),
)
def test_avoiding_nodes_changes_where_a_task_goes_never_whether_it_fits(
    free: list[int], avoid: set[int], gpus: int
) -> None:
    view = ClusterView(cluster(len(free), gpus=4))
    for i, n in enumerate(free):  # take 4 - n GPUs on node i
        if n < 4:
            used = place_task(GpuRequest(4 - n), view, within=[f"n{i}"])
            assert used is not None
            view.bind(used, 0, 0)
    avoided = frozenset(f"n{i}" for i in avoid)
    plain = place_task(GpuRequest(gpus), view)
    spread = place_task(GpuRequest(gpus, avoid_nodes=avoided), view)
    assert (plain is None) == (spread is None)
    fits_elsewhere = any(n >= gpus and f"n{i}" not in avoided for i, n in enumerate(free))
    if spread is not None:
        assert (spread.node not in avoided) == fits_elsewhere  # the oracle: any fitting node


def test_replicas_bound_in_one_cycle_land_on_different_nodes() -> None:
    view = ClusterView(cluster(3, gpus=8))
    decision = run_cycle(view, [replica("r1"), replica("r2"), replica("r3"), job("other")])
    nodes = [decision.binds[r].nodes[0] for r in ("r1", "r2", "r3")]
    assert sorted(nodes) == ["n0", "n1", "n2"]


def test_without_a_group_the_same_jobs_pack_onto_one_node() -> None:
    view = ClusterView(cluster(3, gpus=8))
    decision = run_cycle(view, [job("r1"), job("r2"), job("r3")])
    assert len({decision.binds[r].nodes[0] for r in ("r1", "r2", "r3")}) == 1


def test_a_replacement_replica_avoids_the_nodes_of_the_running_ones() -> None:
    view = ClusterView(cluster(3, gpus=8))
    first = start(view, replica("r1"))
    second = start(view, replica("r2"), on=_on(view, replica("r2"), avoid={first.tasks[0].node}))
    running = [
        replace(first, spread="service:a/llm"),
        replace(second, spread="service:a/llm"),
    ]
    held = {r.tasks[0].node for r in running}
    decision = run_cycle(view, [replica("r3"), replica("x1", group="service:a/other")], running)
    assert decision.binds["r3"].nodes[0] not in held
    # another group is free to share: it packs next to the running replicas
    assert decision.binds["x1"].nodes[0] in held


def test_more_replicas_than_nodes_still_all_run() -> None:
    view = ClusterView(cluster(2, gpus=8))
    decision = run_cycle(view, [replica(f"r{i}") for i in range(5)])
    nodes = [decision.binds[f"r{i}"].nodes[0] for i in range(5)]
    assert len(nodes) == 5 and set(nodes) == {"n0", "n1"}


def _on(view: ClusterView, pending: PendingJob, avoid: set[str]) -> GangPlacement:
    found = place(replace(pending.request, avoid_nodes=frozenset(avoid)), view)
    assert isinstance(found, GangPlacement)
    return found


def test_a_jobs_spread_group_survives_the_codec_and_an_empty_one_is_not_written() -> None:
    spec = JobSpec(("serve",), gpus=1, spread="service:a/llm")
    assert decode_spec(encode_spec(spec)) == spec
    assert "spread" not in encode_spec(replace(spec, spread=""))  # older records agree
