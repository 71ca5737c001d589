"""Which instance a MIG job gets (`choose_slice`), on random layouts of every board: a reused
instance is the lowest usable one of the profile, a plan yields a valid layout keeping every
live instance, and "no fit" only when a brute-force search finds no layout either. A GPU that
serves MIG jobs one after another never holds two instances of one profile."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.allocation.mig import (
    MigInstance,
    MigLayout,
    MigNoFit,
    MigPlacement,
    MigReconfigurationPlan,
    place,
)
from gpu_platform.domain.allocation.mig_jobs import choose_slice
from gpu_platform.domain.allocation.mig_tables import COMPUTE_SLICES, MIG_MODELS, MigProfile
from gpu_platform.domain.errors import DomainError


@st.composite
def layouts(draw: st.DrawFn) -> MigLayout:
    model = MIG_MODELS[draw(st.sampled_from(sorted(MIG_MODELS)))]
    layout = MigLayout(model)
    for n in range(draw(st.integers(0, 7))):
        p = draw(st.sampled_from(model.profiles))
        try:
            layout = place(layout, str(n), MigPlacement(p, draw(st.sampled_from(p.starts))))
        except DomainError:
            continue
    return layout


def _can_ever_fit(layout: MigLayout, p: MigProfile) -> bool:
    """Brute force: counts allow one more `p`, and some assignment of starts to the live
    instances leaves a free start for it."""
    if layout.count(p) >= p.max_instances:
        return False
    if layout.compute_used() + p.compute_slices > COMPUTE_SLICES:
        return False
    items = list(layout.instances)
    for starts in itertools.product(*[i.profile.starts for i in items]):
        cells = [c for inst, s in zip(items, starts, strict=True) for c in inst.profile.slices(s)]
        if len(cells) == len(set(cells)) and any(
            not set(cells) & set(p.slices(ns)) for ns in p.starts
        ):
            return True
    return False


@settings(max_examples=200, deadline=None)
@given(layout=layouts(), data=st.data())
def test_the_slice_a_job_gets_is_a_usable_instance_a_valid_plan_or_truly_impossible(
    layout: MigLayout, data: st.DataObject
) -> None:
    profile = data.draw(st.sampled_from(layout.model.profiles))
    ids = [i.instance_id for i in layout.instances]
    usable = set(data.draw(st.lists(st.sampled_from(ids), unique=True))) if ids else set()
    choice = choose_slice(layout, profile.name, usable)
    mine = [i for i in layout.instances if i.profile == profile and i.instance_id in usable]
    if mine:
        assert choice == min(mine, key=lambda i: i.start)
    elif isinstance(choice, MigReconfigurationPlan):
        after = place(choice.result, "job", choice.new)
        after.check_invariants()
        assert sorted(i.instance_id for i in choice.result.instances) == sorted(ids)
        assert after.get("job").profile == profile
    else:
        assert isinstance(choice, MigNoFit)
        assert not _can_ever_fit(layout, profile)


@settings(max_examples=100, deadline=None)
@given(model=st.sampled_from(sorted(MIG_MODELS)), data=st.data())
def test_jobs_one_after_another_never_leave_two_instances_of_a_profile(
    model: str, data: st.DataObject
) -> None:
    board = MIG_MODELS[model]
    layout = MigLayout(board)
    for n in range(data.draw(st.integers(1, 12))):
        p = data.draw(st.sampled_from(board.profiles))
        choice = choose_slice(layout, p.name, {i.instance_id for i in layout.instances})
        if isinstance(choice, MigReconfigurationPlan):
            layout = place(choice.result, f"j{n}", choice.new)
        else:
            assert isinstance(choice, MigInstance | MigNoFit)
        layout.check_invariants()
        for q in board.profiles:
            assert layout.count(q) <= 1
