"""First-fit placement against a brute-force oracle on small clusters."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.model.node import Inventory
from gpu_platform.domain.placement import (
    NodeView,
    Placement,
    PlacementRequest,
    Unschedulable,
    first_fit,
)
from gpu_platform.testing.strategies import inventories


@st.composite
def views(draw: st.DrawFn) -> list[NodeView]:
    inventory: Inventory = draw(inventories(max_nodes=3, max_gpus=8))
    out = []
    for node in inventory.nodes:
        free = tuple(g for g in node.gpus if draw(st.booleans()))
        out.append(NodeView(node.name, free))
    return out


@settings(max_examples=200, deadline=None)
@given(views(), st.integers(0, 9))
def test_first_fit_places_exactly_when_some_node_has_enough_free_gpus(
    nodes: list[NodeView], want: int
) -> None:
    result = first_fit(PlacementRequest(want), nodes)
    feasible = any(len(n.free) >= want for n in nodes)
    assert isinstance(result, Placement) == feasible
    if isinstance(result, Placement):
        free = {g.uuid for n in nodes if n.name == result.node for g in n.free}
        chosen = [g.uuid for g in result.gpus]
        assert len(chosen) == want == len(set(chosen))
        assert set(chosen) <= free
    else:
        assert isinstance(result, Unschedulable)
        assert str(want) in result.reason


@settings(max_examples=200, deadline=None)
@given(views(), st.integers(1, 8))
def test_first_fit_stays_inside_one_numa_node_whenever_the_chosen_node_allows(
    nodes: list[NodeView], want: int
) -> None:
    result = first_fit(PlacementRequest(want), nodes)
    if not isinstance(result, Placement):
        return
    node = next(n for n in nodes if n.name == result.node)
    per_numa: dict[int, int] = {}
    for g in node.free:
        per_numa[g.numa_node] = per_numa.get(g.numa_node, 0) + 1
    if max(per_numa.values()) >= want:
        assert len({g.numa_node for g in result.gpus}) == 1


def test_a_cpu_only_job_fits_anywhere() -> None:
    assert first_fit(PlacementRequest(0), [NodeView("a", ())]) == Placement("a", ())
