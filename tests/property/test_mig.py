"""MIG placement as a state machine: random creates (with reconfiguration when needed) and
destroys on each board; checked against brute-force oracles on the 8-slice geometry."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gpu_platform.domain.allocation.mig import (
    MigLayout,
    MigNoFit,
    MigPlacement,
    capacity,
    choose_placement,
    place,
    plan_reconfiguration,
    remove,
)
from gpu_platform.domain.allocation.mig_tables import (
    COMPUTE_SLICES,
    MIG_MODELS,
    MigProfile,
)


def _brute_capacity(layout: MigLayout, p: MigProfile) -> int:
    """Largest k such that k more instances of p fit together, by trying every subset."""
    occ = {c for i in layout.instances for c in i.slices}
    left = min(
        p.max_instances - layout.count(p),
        (COMPUTE_SLICES - layout.compute_used()) // p.compute_slices,
    )
    best = 0
    for k in range(1, len(p.starts) + 1):
        for starts in itertools.combinations(p.starts, k):
            cells = [c for s in starts for c in p.slices(s)]
            if len(cells) == len(set(cells)) and not occ & set(cells):
                best = max(best, k)
    return min(best, max(left, 0))


def _brute_min_moves(layout: MigLayout, p: MigProfile) -> int | None:
    items = list(layout.instances)
    best: int | None = None
    for starts in itertools.product(*[i.profile.starts for i in items]):
        cells: list[int] = []
        for inst, s in zip(items, starts, strict=True):
            cells += list(inst.profile.slices(s))
        if len(cells) != len(set(cells)):
            continue
        if any(not set(cells) & set(p.slices(ns)) for ns in p.starts):
            moved = sum(s != i.start for i, s in zip(items, starts, strict=True))
            best = moved if best is None else min(best, moved)
    return best


class MigMachine(RuleBasedStateMachine):
    @initialize(model=st.sampled_from(sorted(MIG_MODELS)))
    def setup(self, model: str) -> None:
        self.layout = MigLayout(MIG_MODELS[model])
        self.next_id = 0

    @rule(data=st.data())
    def create(self, data: st.DataObject) -> None:
        p = data.draw(st.sampled_from(self.layout.model.profiles))
        choice = choose_placement(self.layout, p)
        if isinstance(choice, MigPlacement):
            # the choice keeps the capacity vector maximal among all free starts
            best = max(
                capacity(place(self.layout, "?", MigPlacement(p, s)))
                for s in p.starts
                if not {c for i in self.layout.instances for c in i.slices} & set(p.slices(s))
            )
            self.layout = place(self.layout, f"g{self.next_id}", choice)
            assert capacity(self.layout) == best
            self.next_id += 1
            return
        plan = plan_reconfiguration(self.layout, p)
        expected = _brute_min_moves(self.layout, p)
        counts_block = _brute_capacity(MigLayout(self.layout.model, self.layout.instances), p)
        if isinstance(plan, MigNoFit):
            assert expected is None or "instance" in plan.reason or "compute" in plan.reason
            return
        assert expected is not None and len(plan.destroy) == expected
        assert counts_block == 0  # it did not fit in place
        survivors = {i.instance_id for i in self.layout.instances}
        assert {i.instance_id for i in plan.result.instances} == survivors
        assert {i.instance_id for i in plan.create} == set(plan.destroy)
        for moved in plan.create:
            assert self.layout.get(moved.instance_id).profile == moved.profile
        self.layout = place(plan.result, f"g{self.next_id}", plan.new)
        self.next_id += 1

    @precondition(lambda self: bool(self.layout.instances))
    @rule(data=st.data())
    def destroy(self, data: st.DataObject) -> None:
        inst = data.draw(st.sampled_from(self.layout.instances))
        self.layout = remove(self.layout, inst.instance_id)

    @invariant()
    def no_two_live_instances_overlap_and_capacity_is_exact(self) -> None:
        self.layout.check_invariants()
        for p, cap in zip(self.layout.model.profiles, capacity(self.layout), strict=True):
            assert cap == _brute_capacity(self.layout, p), p.name


MigMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMigMachine = MigMachine.TestCase
