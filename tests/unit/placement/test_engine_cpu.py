"""The engine's CPU terms: CPU best fit, CPU stranding, CPU in the signature, log compaction."""

from __future__ import annotations

import random

import pytest

from gpu_platform.domain.model.gpu import Gpu, Vendor
from gpu_platform.domain.model.node import Node
from gpu_platform.domain.placement import engine
from gpu_platform.domain.placement.engine import place
from gpu_platform.domain.placement.fragmentation import TaskShape, TypicalTasks
from gpu_platform.domain.placement.request import (
    GangPlacement,
    GpuRequest,
    Score,
    TaskPlacement,
)
from gpu_platform.domain.placement.view import ClusterView

FOUR_CORES_PER_GPU = TypicalTasks(((TaskShape(4000, 0, 1, 1000), 1.0),))


def node(name: str, gpus: int = 4, cores: int = 16) -> Node:
    return Node(
        name,
        tuple(Gpu(f"{name}-{i}", i, name, Vendor.NVIDIA, "A", 0) for i in range(gpus)),
        cpus=cores,
        memory_bytes=64 << 30,
    )


def bind(view: ClusterView, request: GpuRequest) -> TaskPlacement:
    result = place(request, view)
    assert isinstance(result, GangPlacement), result
    view.bind(result.tasks[0], request.cpu_milli, request.memory_bytes)
    return result.tasks[0]


def cpu_heavy_a(typical: TypicalTasks) -> ClusterView:
    """Two identical 4-GPU / 16-core nodes; `a` runs a CPU-only task of 6 cores."""
    view = ClusterView([node("a"), node("b")], typical)
    view.bind(TaskPlacement("a", (), (), (), Score(7, 0, 0, 0.0, 0, False)), 6000)
    return view


def test_without_cpu_in_the_typical_tasks_best_fit_prefers_the_node_with_less_cpu_left() -> None:
    view = cpu_heavy_a(ClusterView([]).typical)
    assert bind(view, GpuRequest(1, cpu_milli=4000)).node == "a"


def test_a_task_avoids_the_node_where_it_would_strand_free_gpus_without_cpu() -> None:
    # on `a` the 3 GPUs left would need 3 x 0.75 x 4 = 9 cores and only 6 remain
    view = cpu_heavy_a(FOUR_CORES_PER_GPU)
    task = bind(view, GpuRequest(1, cpu_milli=4000))
    assert task.node == "b"
    assert task.score.stranded_cores == 0
    assert task.score.cpu_leftover_milli == 12000


def test_the_signature_carries_free_cpu_and_a_release_restores_it() -> None:
    view = ClusterView([node("a")])
    before = view.signature("a")
    task = bind(view, GpuRequest(0, cpu_milli=3000))
    assert view.signature("a") == (before[0], before[1], before[2] - 3000)
    view.release(task, 3000)
    assert view.signature("a") == before
    view.check_invariants()


def run_sequence(seed: int) -> tuple[list[tuple[str, tuple[int, ...]] | None], int]:
    rng = random.Random(seed)
    view = ClusterView([node(f"n{i}", 4, 32) for i in range(4)], FOUR_CORES_PER_GPU)
    shapes = [
        GpuRequest(1, cpu_milli=1000 * rng.randrange(1, 9)),
        GpuRequest(1, gpu_milli=500, cpu_milli=2000),
        GpuRequest(2, cpu_milli=7000),
        GpuRequest(0, cpu_milli=3000),
    ]
    bound: list[tuple[GpuRequest, TaskPlacement]] = []
    answers: list[tuple[str, tuple[int, ...]] | None] = []
    longest = 0
    for _ in range(3000):
        if bound and rng.random() < 0.5:
            request, task = bound.pop(rng.randrange(len(bound)))
            view.release(task, request.cpu_milli)
            continue
        request = rng.choice(shapes)
        result = place(request, view)
        if isinstance(result, GangPlacement):
            task = result.tasks[0]
            view.bind(task, request.cpu_milli)
            bound.append((request, task))
            answers.append((task.node, tuple(g.gpu.index for g in task.gpus)))
        else:
            answers.append(None)
        longest = max(longest, len(view.log))
    view.check_invariants()
    return answers, longest


def test_compacting_the_signature_log_changes_no_decision(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(engine, "_LOG_SLACK", 16)
    compacted, longest = run_sequence(5)
    assert longest <= 2 * 4 + 16 + 64  # bounded (releases between decisions add a few)
    monkeypatch.setattr(engine, "_LOG_SLACK", 1 << 30)
    plain, longest_plain = run_sequence(5)
    assert longest_plain > 100  # without compaction the log only grows
    assert compacted == plain
