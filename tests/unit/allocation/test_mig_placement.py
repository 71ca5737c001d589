from __future__ import annotations

import itertools

import pytest

from gpu_platform.domain.allocation.mig import (
    MigLayout,
    MigNoFit,
    MigPlacement,
    MigReconfigurationPlan,
    capacity,
    choose_placement,
    free_starts,
    place,
    plan_reconfiguration,
    remove,
)
from gpu_platform.domain.allocation.mig_tables import A100_40GB, H100_80GB, MigGpuModel
from gpu_platform.domain.errors import Conflict, InvalidRequest, NotFound

MODELS = [A100_40GB, H100_80GB]


def _layout(model: MigGpuModel, *items: tuple[str, int]) -> MigLayout:
    layout = MigLayout(model)
    for i, (name, start) in enumerate(items):
        layout = place(layout, f"i{i}", MigPlacement(model.profile(name), start))
    layout.check_invariants()
    return layout


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_every_placement_of_every_profile_can_be_created_on_an_empty_gpu(
    model: MigGpuModel,
) -> None:
    for p in model.profiles:
        for start in p.starts:
            layout = place(MigLayout(model), "x", MigPlacement(p, start))
            layout.check_invariants()
            assert free_starts(layout, p) == tuple(s for s in p.starts if s != start)


def test_a_one_slice_instance_goes_where_it_keeps_a_three_slice_half_free() -> None:
    layout = _layout(A100_40GB, ("3g.20gb", 0))
    placement = choose_placement(layout, A100_40GB.profile("1g.5gb"))
    assert isinstance(placement, MigPlacement)
    assert placement.start in (4, 5, 6)
    after = place(layout, "n", placement)
    # a 2g instance (starts 0,2,4) still fits after the chosen placement
    assert free_starts(after, A100_40GB.profile("2g.10gb"))


def test_the_first_small_instance_on_an_empty_gpu_spares_the_four_slice_profile() -> None:
    p = H100_80GB.profile("1g.10gb")
    placement = choose_placement(MigLayout(H100_80GB), p)
    assert isinstance(placement, MigPlacement) and placement.start >= 4
    after = place(MigLayout(H100_80GB), "a", placement)
    assert capacity(after)[1] == 1  # 4g.40gb still possible


def test_an_overlapping_or_illegal_placement_is_refused() -> None:
    layout = _layout(A100_40GB, ("4g.20gb", 0))
    with pytest.raises(Conflict):
        place(layout, "b", MigPlacement(A100_40GB.profile("2g.10gb"), 2))
    with pytest.raises(InvalidRequest):
        place(layout, "b", MigPlacement(A100_40GB.profile("2g.10gb"), 6))
    with pytest.raises(Conflict):
        place(layout, "i0", MigPlacement(A100_40GB.profile("1g.5gb"), 6))


def test_instance_counts_and_compute_slices_are_limits() -> None:
    layout = _layout(A100_40GB, ("1g.5gb+me", 0))
    assert isinstance(choose_placement(layout, A100_40GB.profile("1g.5gb+me")), MigNoFit)
    full = _layout(A100_40GB, *[("1g.5gb", s) for s in range(7)])
    nofit = choose_placement(full, A100_40GB.profile("1g.5gb"))
    assert isinstance(nofit, MigNoFit) and "at most 7" in nofit.reason


def test_removing_an_unknown_instance_is_not_found() -> None:
    with pytest.raises(NotFound):
        remove(MigLayout(A100_40GB), "nope")


def test_a_reconfiguration_moves_the_fewest_instances_to_fit_a_large_profile() -> None:
    # 1g at 0 and at 4: neither 3g half is free although 6 memory slices are
    layout = _layout(A100_40GB, ("1g.5gb", 0), ("1g.5gb", 4))
    p3 = A100_40GB.profile("3g.20gb")
    assert isinstance(choose_placement(layout, p3), MigNoFit)
    plan = plan_reconfiguration(layout, p3)
    assert isinstance(plan, MigReconfigurationPlan)
    assert len(plan.destroy) == 1
    final = place(plan.result, "new", plan.new)
    final.check_invariants()
    assert {i.instance_id for i in final.instances} == {"i0", "i1", "new"}


def test_a_reconfiguration_is_empty_when_the_profile_fits_already() -> None:
    plan = plan_reconfiguration(MigLayout(H100_80GB), H100_80GB.profile("7g.80gb"))
    assert isinstance(plan, MigReconfigurationPlan) and plan.destroy == () and plan.create == ()


def test_no_reconfiguration_exists_when_compute_slices_run_out() -> None:
    layout = _layout(A100_40GB, ("4g.20gb", 0), ("2g.10gb", 4))
    plan = plan_reconfiguration(layout, A100_40GB.profile("2g.10gb"))
    assert isinstance(plan, MigNoFit) and "compute" in plan.reason


def _brute_force_min_moves(layout: MigLayout, profile_name: str) -> int | None:
    """Try every assignment of starts to the live instances plus the new one."""
    profile = layout.model.profile(profile_name)
    items = list(layout.instances)
    best: int | None = None
    for starts in itertools.product(*[i.profile.starts for i in items]):
        for new_start in profile.starts:
            cells: list[int] = []
            for inst, s in zip(items, starts, strict=True):
                cells += list(inst.profile.slices(s))
            cells += list(profile.slices(new_start))
            if len(cells) == len(set(cells)):
                moved = sum(s != i.start for i, s in zip(items, starts, strict=True))
                best = moved if best is None else min(best, moved)
    return best


@pytest.mark.parametrize(
    ("items", "want"),
    [
        ((("1g.5gb", 0), ("1g.5gb", 4)), "3g.20gb"),
        ((("1g.5gb", 1), ("1g.5gb", 3), ("1g.5gb", 5)), "4g.20gb"),
        ((("2g.10gb", 2), ("1g.5gb", 6)), "4g.20gb"),
        ((("1g.10gb", 2), ("1g.10gb", 4)), "3g.20gb"),
        ((("1g.5gb", 0), ("1g.5gb", 2), ("1g.5gb", 4), ("1g.5gb", 6)), "2g.10gb"),
    ],
)
def test_the_plan_moves_as_few_instances_as_brute_force_finds(
    items: tuple[tuple[str, int], ...], want: str
) -> None:
    layout = _layout(A100_40GB, *items)
    plan = plan_reconfiguration(layout, A100_40GB.profile(want))
    expected = _brute_force_min_moves(layout, want)
    if expected is None:
        assert isinstance(plan, MigNoFit)
    else:
        assert isinstance(plan, MigReconfigurationPlan)
        assert len(plan.destroy) == expected
        place(plan.result, "new", plan.new).check_invariants()
