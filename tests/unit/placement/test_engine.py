"""The placement engine on the simulated profiles: ladder, packing, gangs, reasons."""

from __future__ import annotations

from gpu_platform.adapters.outbound.sim.profiles import profile_node
from gpu_platform.domain.model.node import Node
from gpu_platform.domain.placement import first_fit
from gpu_platform.domain.placement.engine import place
from gpu_platform.domain.placement.first_fit import NodeView, PlacementRequest, Unschedulable
from gpu_platform.domain.placement.request import Affinity, GangPlacement, GpuRequest
from gpu_platform.domain.placement.view import ClusterView
from gpu_platform.domain.topology.cross_node import NodeLevel


def nodes(profile: str, n: int, racks: int = 1) -> list[Node]:
    return [
        profile_node(profile, f"{profile}-{i}", {"rack": f"r{i % racks}", "leaf": f"l{i % racks}"})
        for i in range(n)
    ]


def placed(result: GangPlacement | Unschedulable) -> GangPlacement:
    assert isinstance(result, GangPlacement), result
    return result


def bind_all(view: ClusterView, result: GangPlacement, request: GpuRequest) -> None:
    for task in result.tasks:
        view.bind(task, request.cpu_milli, request.memory_bytes)


def test_a_four_gpu_task_on_pcie_hosts_stays_under_one_switch() -> None:
    view = ClusterView(nodes("hgx-8x-pcie", 1))
    task = placed(place(GpuRequest(4), view)).tasks[0]
    assert len(task.numa_nodes) == 1
    assert task.score.tier == 5  # PIX: one PCIe switch
    assert task.cpus  # pinned to the CPUs of that NUMA node


def test_a_pair_prefers_an_nvlink_bridge_over_pcie() -> None:
    view = ClusterView(nodes("mixed-vendor", 1))
    task = placed(place(GpuRequest(2), view)).tasks[0]
    assert task.score.tier == 7
    assert {g.gpu.vendor for g in task.gpus} == {task.gpus[0].gpu.vendor}


def test_required_nvlink_is_unschedulable_on_pcie_only_hosts_with_a_reason() -> None:
    view = ClusterView(nodes("hgx-8x-pcie", 2))
    result = place(GpuRequest(2, nvlink=Affinity.REQUIRED), view)
    assert isinstance(result, Unschedulable)
    assert dict(result.constraints) == {"nvlink required": 2}
    assert "nvlink required" in result.reason


def test_fractional_requests_pack_onto_a_partly_used_gpu() -> None:
    view = ClusterView(nodes("dgx-a100", 2))
    request = GpuRequest(1, gpu_milli=300)
    first = placed(place(request, view))
    bind_all(view, first, request)
    second = placed(place(request, view))
    assert second.tasks[0].node == first.tasks[0].node
    assert second.tasks[0].gpus[0].gpu == first.tasks[0].gpus[0].gpu


def test_small_jobs_keep_a_whole_node_free_for_an_eight_gpu_job() -> None:
    view = ClusterView(nodes("dgx-h100", 2))
    for _ in range(6):
        request = GpuRequest(1)
        bind_all(view, placed(place(request, view)), request)
    assert isinstance(place(GpuRequest(8), view), GangPlacement)


def test_model_cpu_and_memory_constraints_are_reported_per_constraint() -> None:
    view = ClusterView(nodes("dgx-a100", 1) + nodes("dgx-h100", 1))
    result = place(GpuRequest(1, models=frozenset({"V100"})), view)
    assert isinstance(result, Unschedulable)
    assert dict(result.constraints) == {"gpu model": 2}
    huge = place(GpuRequest(1, cpu_milli=10**9), view)
    assert isinstance(huge, Unschedulable)
    assert dict(huge.constraints) == {"cpu": 2}


def test_a_gang_lands_in_one_rack_when_one_rack_can_hold_it() -> None:
    view = ClusterView(nodes("dgx-h100", 8, racks=4))
    result = placed(place(GpuRequest(8, tasks=2), view))
    assert len(set(result.nodes)) == 2
    assert result.spread <= NodeLevel.SAME_LEAF


def test_a_gang_that_does_not_fit_places_nothing_and_changes_nothing() -> None:
    view = ClusterView(nodes("dgx-h100", 3))
    before = {name: view.signature(name) for name in view.slots}
    result = place(GpuRequest(8, tasks=4), view)
    assert isinstance(result, Unschedulable)
    assert {name: view.signature(name) for name in view.slots} == before
    view.check_invariants()


def test_required_same_rack_refuses_a_gang_spread_over_racks() -> None:
    view = ClusterView(nodes("dgx-h100", 4, racks=4))
    request = GpuRequest(8, tasks=2, same_rack=Affinity.REQUIRED)
    assert isinstance(place(request, view), Unschedulable)
    assert isinstance(place(GpuRequest(8, tasks=2), view), GangPlacement)


def test_release_restores_the_view_exactly() -> None:
    view = ClusterView(nodes("dgx-a100", 2))
    before = {name: view.signature(name) for name in view.slots}
    request = GpuRequest(3, cpu_milli=4000, memory_bytes=1 << 30)
    result = placed(place(request, view))
    bind_all(view, result, request)
    assert {name: view.signature(name) for name in view.slots} != before
    for task in result.tasks:
        view.release(task, request.cpu_milli, request.memory_bytes)
    assert {name: view.signature(name) for name in view.slots} == before
    view.check_invariants()


def test_binding_more_than_is_free_is_refused() -> None:
    view = ClusterView(nodes("dgx-a100", 1))
    request = GpuRequest(8)
    result = placed(place(request, view))
    bind_all(view, result, request)
    try:
        bind_all(view, result, request)
    except ValueError:
        pass
    else:
        raise AssertionError("double bind accepted")
    view.check_invariants()


def test_first_fit_keeps_working_beside_the_engine() -> None:
    node = nodes("dgx-a100", 1)[0]
    assert not isinstance(
        first_fit(PlacementRequest(2), [NodeView(node.name, node.gpus)]), Unschedulable
    )


def test_a_removed_node_is_never_chosen_and_can_come_back() -> None:
    cluster = nodes("dgx-h100", 2)
    view = ClusterView(cluster)
    first = placed(place(GpuRequest(8), view)).tasks[0].node
    view.remove_node(first)
    assert placed(place(GpuRequest(8), view)).tasks[0].node != first
    view.add_node(next(n for n in cluster if n.name == first))
    view.check_invariants()
    assert len(view.slots) == 2


def test_place_whole_answers_in_first_fits_types_and_respects_the_free_list() -> None:
    from gpu_platform.domain.placement.engine import place_whole
    from gpu_platform.domain.placement.first_fit import Placement

    cluster = nodes("dgx-h100", 2)
    free = {cluster[0].name: [0, 1, 2], cluster[1].name: [4, 5, 6, 7]}
    view = ClusterView.from_free(cluster, free)
    got = place_whole(PlacementRequest(4), view)
    assert isinstance(got, Placement)
    assert got.node == cluster[1].name
    assert sorted(g.index for g in got.gpus) == [4, 5, 6, 7]
    assert isinstance(place_whole(PlacementRequest(5), view), Unschedulable)
