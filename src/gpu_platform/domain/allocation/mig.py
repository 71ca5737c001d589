"""MIG GPU-instance placement: buddy-like slots over 8 memory slices and 7 compute slices.

Theory of operation. A `MigLayout` is a frozen picture of one MIG-enabled GPU: its board model
(profile table, `mig_tables`) and its live GPU instances, each a profile at a legal start. A
layout is valid when no two instances share a memory slice, compute slices sum to <= 7, and no
profile exceeds its instance count (`check_invariants`). All functions here are pure.

- `free_starts(layout, profile)`: the legal starts of `profile` that overlap nothing.
- `capacity(layout)`: for each profile, largest first, how many more instances could be created
  one after another (the same figure as NVML's remaining capacity). A profile's own placements
  never overlap each other, so the count is exact without search.
- `choose_placement(layout, profile)`: among the free starts, the one whose resulting capacity
  vector is lexicographically greatest, largest profiles first, so big profiles stay possible
  (ties: lowest start). Returns `MigPlacement` or `MigNoFit(reason)`.
- `plan_reconfiguration(layout, profile)`: when the profile does not fit as things stand, the
  layout that holds every live instance plus the new one while re-creating (destroy + create
  elsewhere) the fewest instances, found by exhaustive search (at most 7 instances of <= 7
  starts each); or `MigNoFit` when no layout can hold them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from gpu_platform.domain.allocation.mig_tables import (
    COMPUTE_SLICES,
    MigGpuModel,
    MigProfile,
)
from gpu_platform.domain.errors import Conflict, InvalidRequest, NotFound

__all__ = [
    "MigInstance",
    "MigLayout",
    "MigNoFit",
    "MigPlacement",
    "MigReconfigurationPlan",
    "capacity",
    "choose_placement",
    "free_starts",
    "layout_from_instances",
    "place",
    "plan_reconfiguration",
    "remove",
]


@dataclass(frozen=True, slots=True)
class MigInstance:
    """A live GPU instance: `instance_id` is ours (stable across moves), `start` in memory
    slices."""

    instance_id: str
    profile: MigProfile
    start: int

    @property
    def slices(self) -> range:
        return self.profile.slices(self.start)


@dataclass(frozen=True, slots=True)
class MigLayout:
    """One MIG-enabled GPU: its model and live instances (sorted by start)."""

    model: MigGpuModel
    instances: tuple[MigInstance, ...] = ()

    def occupied(self) -> int:
        """Bitmask of occupied memory slices (bit i = slice i)."""
        mask = 0
        for inst in self.instances:
            mask |= _span(inst.profile, inst.start)
        return mask

    def compute_used(self) -> int:
        return sum(i.profile.compute_slices for i in self.instances)

    def count(self, profile: MigProfile) -> int:
        return sum(1 for i in self.instances if i.profile.name == profile.name)

    def get(self, instance_id: str) -> MigInstance:
        for inst in self.instances:
            if inst.instance_id == instance_id:
                return inst
        raise NotFound("mig instance", instance_id)

    def check_invariants(self) -> None:
        seen = 0
        ids: set[str] = set()
        for inst in self.instances:
            p = inst.profile
            assert p in self.model.profiles, f"{p.name} is not a {self.model.name} profile"
            assert inst.start in p.starts, f"{p.name} cannot start at {inst.start}"
            span = _span(p, inst.start)
            assert not seen & span, f"{inst.instance_id} overlaps another instance"
            seen |= span
            assert inst.instance_id not in ids, f"duplicate instance id {inst.instance_id}"
            ids.add(inst.instance_id)
        assert self.compute_used() <= COMPUTE_SLICES, "more than 7 compute slices in use"
        for p in self.model.profiles:
            assert self.count(p) <= p.max_instances, f"too many {p.name} instances"
        assert list(self.instances) == sorted(self.instances, key=lambda i: i.start)


@dataclass(frozen=True, slots=True)
class MigPlacement:
    profile: MigProfile
    start: int


@dataclass(frozen=True, slots=True)
class MigNoFit:
    profile: MigProfile
    reason: str


@dataclass(frozen=True, slots=True)
class MigReconfigurationPlan:
    """Destroy `destroy` (ids), then create `create` (the moved instances at their new starts)
    and finally the requested instance at `new.start`. `result` is the layout afterwards
    (without the new instance's id, which the caller assigns with `place`)."""

    destroy: tuple[str, ...]
    create: tuple[MigInstance, ...]
    new: MigPlacement
    result: MigLayout


def _span(profile: MigProfile, start: int) -> int:
    return ((1 << profile.memory_slices) - 1) << start


def _fits(layout: MigLayout, profile: MigProfile) -> str | None:
    """None when one more `profile` instance is allowed by counts; otherwise the reason."""
    if profile not in layout.model.profiles:
        return f"{layout.model.name} has no profile {profile.name}"
    if layout.count(profile) >= profile.max_instances:
        return f"{profile.name}: at most {profile.max_instances} instance(s)"
    if layout.compute_used() + profile.compute_slices > COMPUTE_SLICES:
        return f"{profile.name}: needs {profile.compute_slices} compute slices, " + (
            f"{COMPUTE_SLICES - layout.compute_used()} left"
        )
    return None


def free_starts(layout: MigLayout, profile: MigProfile) -> tuple[int, ...]:
    """Legal starts of `profile` that overlap no live instance (counts not considered)."""
    occ = layout.occupied()
    return tuple(s for s in profile.starts if not occ & _span(profile, s))


def capacity(layout: MigLayout) -> tuple[int, ...]:
    """Per profile of the model (largest first): how many more instances could be created."""
    out: list[int] = []
    occ = layout.occupied()
    compute_left = COMPUTE_SLICES - layout.compute_used()
    for p in layout.model.profiles:
        free = sum(1 for s in p.starts if not occ & _span(p, s))
        out.append(min(free, p.max_instances - layout.count(p), compute_left // p.compute_slices))
    return tuple(out)


def layout_from_instances(
    model: MigGpuModel, instances: Iterable[tuple[str, int, int]]
) -> MigLayout:
    """A validated layout from what a device reports: (instance id, NVML profile id, start).

    Raises InvalidRequest for an unknown profile id and Conflict for an impossible layout."""
    layout = MigLayout(model)
    for instance_id, profile_id, start in instances:
        try:
            profile = model.profile(profile_id)
        except KeyError as e:
            raise InvalidRequest("profile_id", str(e)) from e
        layout = place(layout, instance_id, MigPlacement(profile, start))
    return layout


def _with(layout: MigLayout, inst: MigInstance) -> MigLayout:
    return replace(
        layout, instances=tuple(sorted((*layout.instances, inst), key=lambda i: i.start))
    )


def choose_placement(layout: MigLayout, profile: MigProfile) -> MigPlacement | MigNoFit:
    """The free start that keeps the largest profiles possible, or the reason none fits."""
    reason = _fits(layout, profile)
    if reason is not None:
        return MigNoFit(profile, reason)
    starts = free_starts(layout, profile)
    if not starts:
        return MigNoFit(profile, f"{profile.name}: no free placement among {profile.starts}")
    best = max(
        starts,
        key=lambda s: (capacity(_with(layout, MigInstance("?", profile, s))), -s),
    )
    return MigPlacement(profile, best)


def place(layout: MigLayout, instance_id: str, placement: MigPlacement) -> MigLayout:
    """The layout with a new instance at `placement`; Conflict if it overlaps or exceeds a
    limit, InvalidRequest for an illegal start."""
    p = placement.profile
    if placement.start not in p.starts:
        raise InvalidRequest("start", f"{p.name} cannot start at {placement.start}")
    if any(i.instance_id == instance_id for i in layout.instances):
        raise Conflict(f"mig instance {instance_id!r} already exists")
    reason = _fits(layout, p)
    if reason is not None:
        raise Conflict(reason)
    if layout.occupied() & _span(p, placement.start):
        raise Conflict(f"{p.name} at {placement.start} overlaps a live instance")
    return _with(layout, MigInstance(instance_id, p, placement.start))


def remove(layout: MigLayout, instance_id: str) -> MigLayout:
    """The layout without instance `instance_id` (NotFound if absent)."""
    layout.get(instance_id)
    return replace(
        layout, instances=tuple(i for i in layout.instances if i.instance_id != instance_id)
    )


def plan_reconfiguration(
    layout: MigLayout, profile: MigProfile
) -> MigReconfigurationPlan | MigNoFit:
    """Fewest instance re-creations that make room for `profile` (empty plan if it fits)."""
    counts_ok = _fits(layout, profile)
    if counts_ok is not None:
        return MigNoFit(profile, counts_ok)
    direct = choose_placement(layout, profile)
    if isinstance(direct, MigPlacement):
        return MigReconfigurationPlan((), (), direct, layout)
    items = sorted(
        layout.instances, key=lambda i: (-i.profile.memory_slices, i.start, i.instance_id)
    )
    best: tuple[int, tuple[int, ...], int] | None = None  # (moved, starts per item, new start)

    def search(k: int, occ: int, starts: list[int], moved: int) -> None:
        nonlocal best
        if best is not None and moved > best[0]:
            return
        if k == len(items):
            for s in profile.starts:
                if not occ & _span(profile, s):
                    cand = (moved, tuple(starts), s)
                    if best is None or _better(cand, best, layout, items, profile):
                        best = cand
            return
        inst = items[k]
        order = [inst.start] + [s for s in inst.profile.starts if s != inst.start]
        for s in order:
            span = _span(inst.profile, s)
            if occ & span:
                continue
            starts.append(s)
            search(k + 1, occ | span, starts, moved + (s != inst.start))
            starts.pop()

    search(0, 0, [], 0)
    if best is None:
        return MigNoFit(
            profile, f"{profile.name}: no layout holds the {len(items)} live instances and it"
        )
    _moved, starts, new_start = best
    moved_items = [(inst, s) for inst, s in zip(items, starts, strict=True) if s != inst.start]
    result = replace(
        layout,
        instances=tuple(
            sorted(
                (replace(inst, start=s) for inst, s in zip(items, starts, strict=True)),
                key=lambda i: i.start,
            )
        ),
    )
    return MigReconfigurationPlan(
        destroy=tuple(inst.instance_id for inst, _ in moved_items),
        create=tuple(replace(inst, start=s) for inst, s in moved_items),
        new=MigPlacement(profile, new_start),
        result=result,
    )


def _better(
    cand: tuple[int, tuple[int, ...], int],
    best: tuple[int, tuple[int, ...], int],
    layout: MigLayout,
    items: list[MigInstance],
    profile: MigProfile,
) -> bool:
    """Fewer moves wins; then the larger remaining capacity (largest profiles first)."""
    if cand[0] != best[0]:
        return cand[0] < best[0]
    return _score(cand, layout, items, profile) > _score(best, layout, items, profile)


def _score(
    cand: tuple[int, tuple[int, ...], int],
    layout: MigLayout,
    items: list[MigInstance],
    profile: MigProfile,
) -> tuple[tuple[int, ...], int]:
    placed: Iterable[MigInstance] = (
        replace(inst, start=s) for inst, s in zip(items, cand[1], strict=True)
    )
    after = replace(
        layout,
        instances=tuple(
            sorted((*placed, MigInstance("?", profile, cand[2])), key=lambda i: i.start)
        ),
    )
    return capacity(after), -cand[2]
