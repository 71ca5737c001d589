"""Placement engine properties: a brute-force oracle on small clusters, and invariants over
random request sequences (shares <= 1000, CPU/memory within the node, gangs all-or-nothing,
required constraints always hold)."""

from __future__ import annotations

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gpu_platform.adapters.outbound.sim.profiles import profile_node
from gpu_platform.domain.placement.engine import (
    CPU_STRAND_FRACTION,
    place,
    ranking_key,
)
from gpu_platform.domain.placement.first_fit import Unschedulable
from gpu_platform.domain.placement.fragmentation import (
    NodeShape,
    TaskShape,
    TypicalTasks,
    fragmentation,
)
from gpu_platform.domain.placement.node_choice import tier_of
from gpu_platform.domain.placement.request import (
    Affinity,
    GangPlacement,
    GpuRequest,
    Score,
    TaskPlacement,
)
from gpu_platform.domain.placement.view import DEFAULT_TYPICAL, ClusterView

PROFILES = ("dgx-a100", "dgx-h100", "hgx-8x-pcie", "mixed-vendor")
CLUSTER = [profile_node(p, f"{p}-{i}", {"rack": f"r{i}"}) for i in range(2) for p in PROFILES]
NODE_CPUS = {n.name: n.cpus * 1000 for n in CLUSTER}
NODE_MEM = {n.name: n.memory_bytes for n in CLUSTER}

affinities = st.sampled_from(list(Affinity))
requests = st.builds(
    GpuRequest,
    gpus=st.integers(0, 8),
    cpu_milli=st.sampled_from([0, 1000, 16000, 64000]),
    memory_bytes=st.sampled_from([0, 1 << 30, 400 << 30]),
    nvlink=affinities,
    numa=affinities,
    tasks=st.integers(1, 3),
    same_rack=affinities,
) | st.builds(GpuRequest, gpus=st.just(1), gpu_milli=st.integers(1, 999), numa=affinities)


def oracle_best(view: ClusterView, request: GpuRequest) -> tuple[float, ...] | None:
    """The smallest engine key over every node and every allowed GPU set (exhaustive),
    the CPU-aware fragmentation, best-fit and CPU-stranding terms restated here."""
    best = None
    for slot in view.slots.values():
        if slot.cpu_free < request.cpu_milli or slot.memory_free < request.memory_bytes:
            continue
        hw = view.classes[slot.hw]
        usable = [
            p for p, g in enumerate(hw.gpus) if g.schedulable and slot.free[p] >= request.gpu_milli
        ]
        for s in combinations(usable, request.gpus):
            if request.numa is Affinity.REQUIRED and len({hw.numa[p] for p in s}) > 1:
                continue
            if request.nvlink is Affinity.REQUIRED and not all(
                hw.linked[a][b] for a, b in combinations(s, 2)
            ):
                continue
            tier, bottleneck, total = tier_of(hw, s)
            after = list(slot.free)
            for p in s:
                after[p] -= request.gpu_milli
            cpu_after = slot.cpu_free - request.cpu_milli
            model = view.class_model[slot.hw]
            frag = [
                fragmentation(
                    NodeShape(model, cpu, 1 << 62, tuple(sorted(f, reverse=True))), view.typical
                )
                for f, cpu in ((slot.free, slot.cpu_free), (after, cpu_after))
            ]
            need = CPU_STRAND_FRACTION * view.cpu_per_milli_gpu * sum(after)
            score = Score(
                tier,
                bottleneck,
                total,
                round(frag[1] - frag[0], 6),
                sum(after),
                False,
                cpu_after,
                round(max(0.0, need - cpu_after) / 1000, 6),
            )
            key = ranking_key(score, False, view.max_gpus, view.max_cpu)
            if best is None or key < best:
                best = key
    return best


# typical shapes that ask for CPU: the CPU classes of the fragmentation and the stranding term
CPU_TYPICAL = TypicalTasks(
    (
        (TaskShape(8000, 0, 1, 1000), 0.4),
        (TaskShape(4000, 0, 1, 500), 0.2),
        (TaskShape(64000, 0, 4, 1000), 0.2),
        (TaskShape(2000, 0, 0, 0), 0.2),
    )
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(requests, min_size=1, max_size=12),
    requests,
    st.sampled_from([DEFAULT_TYPICAL, CPU_TYPICAL]),
)
def test_a_single_task_is_the_exhaustive_optimum_of_the_stated_key(
    history: list[GpuRequest], probe: GpuRequest, typical: TypicalTasks
) -> None:
    view = ClusterView(CLUSTER, typical)
    for request in history:
        result = place(request, view)
        if isinstance(result, GangPlacement):
            for task in result.tasks:
                view.bind(task, request.cpu_milli, request.memory_bytes)
    single = GpuRequest(
        gpus=probe.gpus,
        gpu_milli=probe.gpu_milli,
        cpu_milli=probe.cpu_milli,
        memory_bytes=probe.memory_bytes,
        nvlink=probe.nvlink,
        numa=probe.numa,
    )
    result = place(single, view)
    expected = oracle_best(view, single)
    if expected is None:
        assert isinstance(result, Unschedulable)
        return
    assert isinstance(result, GangPlacement)
    assert ranking_key(result.tasks[0].score, False, view.max_gpus, view.max_cpu) == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(requests, min_size=1, max_size=25))
def test_random_sequences_never_oversubscribe_or_break_a_required_constraint(
    history: list[GpuRequest],
) -> None:
    view = ClusterView(CLUSTER)
    used: dict[tuple[str, int], int] = {}
    cpu: dict[str, int] = {}
    mem: dict[str, int] = {}
    for request in history:
        before = {name: view.signature(name) for name in view.slots}
        result = place(request, view)
        assert {name: view.signature(name) for name in view.slots} == before
        if isinstance(result, Unschedulable):
            assert result.reason
            continue
        assert len(result.tasks) == request.tasks  # all or nothing
        if request.same_rack is Affinity.REQUIRED and request.tasks > 1:
            racks = {dict(view.slots[t.node].node.labels).get("rack") for t in result.tasks}
            assert len(racks) == 1
        for task in result.tasks:
            assert len(task.gpus) == request.gpus
            assert len({g.gpu.index for g in task.gpus}) == request.gpus
            if request.numa is Affinity.REQUIRED:
                assert len({g.gpu.numa_node for g in task.gpus}) <= 1
            if request.nvlink is Affinity.REQUIRED and request.gpus > 1:
                assert task.score.tier == 7
            view.bind(task, request.cpu_milli, request.memory_bytes)
            for share in task.gpus:
                key = (task.node, share.gpu.index)
                used[key] = used.get(key, 0) + share.milli
                assert used[key] <= 1000
            cpu[task.node] = cpu.get(task.node, 0) + request.cpu_milli
            mem[task.node] = mem.get(task.node, 0) + request.memory_bytes
            assert cpu[task.node] <= NODE_CPUS[task.node]
            assert mem[task.node] <= NODE_MEM[task.node]
        view.check_invariants()


class PlaceBindRelease(RuleBasedStateMachine):
    """Random place / bind / release / node removal: the view's index stays consistent and
    what it reports free always equals capacity minus what is bound."""

    def __init__(self) -> None:
        super().__init__()
        self.view = ClusterView(CLUSTER)
        self.bound: list[tuple[GpuRequest, TaskPlacement]] = []
        self.removed: set[str] = set()

    @rule(request=requests)
    def place_and_bind(self, request: GpuRequest) -> None:
        result = place(request, self.view)
        if isinstance(result, GangPlacement):
            assert len(result.tasks) == request.tasks
            for task in result.tasks:
                assert task.node not in self.removed
                self.view.bind(task, request.cpu_milli, request.memory_bytes)
                self.bound.append((request, task))

    @precondition(lambda self: bool(self.bound))
    @rule(data=st.data())
    def release_one(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.bound) - 1))
        request, task = self.bound.pop(i)
        if task.node in self.removed:
            return
        self.view.release(task, request.cpu_milli, request.memory_bytes)

    @precondition(lambda self: len(self.removed) < len(CLUSTER) - 1)
    @rule(data=st.data())
    def remove_a_node(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(set(self.view.slots))))
        self.view.remove_node(name)
        self.removed.add(name)

    @invariant()
    def free_is_capacity_minus_bound(self) -> None:
        self.view.check_invariants()
        used: dict[tuple[str, int], int] = {}
        for _, task in self.bound:
            for share in task.gpus:
                key = (task.node, share.gpu.index)
                used[key] = used.get(key, 0) + share.milli
        for name, slot in self.view.slots.items():
            hw = self.view.classes[slot.hw]
            for p, gpu in enumerate(hw.gpus):
                assert slot.free[p] == 1000 - used.get((name, gpu.index), 0)


PlaceBindRelease.TestCase.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None
)
test_place_bind_release_keeps_the_view_consistent = PlaceBindRelease.TestCase
