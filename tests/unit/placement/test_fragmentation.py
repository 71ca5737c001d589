"""FGD fragmentation measure on hand-computed nodes."""

from __future__ import annotations

import pytest

from gpu_platform.domain.placement.fragmentation import (
    NodeShape,
    TaskShape,
    TypicalTasks,
    fragmentation,
    typical_tasks,
)

WHOLE = TaskShape(0, 0, 1, 1000)
HALF = TaskShape(0, 0, 1, 500)
CPU_ONLY = TaskShape(4000, 0, 0, 0)


def test_typical_tasks_keep_the_popular_shapes_and_renormalise() -> None:
    tasks = [WHOLE] * 90 + [HALF] * 9 + [TaskShape(0, 0, 8, 1000)]
    typical = typical_tasks(tasks, threshold=0.95)
    assert [s for s, _ in typical.shapes] == [WHOLE, HALF]
    assert sum(p for _, p in typical.shapes) == pytest.approx(1.0)
    assert typical.shapes[0][1] == pytest.approx(90 / 99)


def test_a_gpu_too_small_for_a_task_is_a_fragment_for_that_task_only() -> None:
    typical = TypicalTasks(((WHOLE, 0.5), (HALF, 0.5)))
    node = NodeShape("A", 8000, 0, (1000, 600, 200))
    # WHOLE fits: fragments are 600 + 200; HALF fits: fragment is 200.
    assert fragmentation(node, typical) == pytest.approx(0.5 * 800 + 0.5 * 200)


def test_a_node_that_cannot_host_a_task_is_all_fragment_for_it() -> None:
    typical = TypicalTasks(((TaskShape(16000, 0, 1, 1000), 1.0),))
    node = NodeShape("A", 8000, 0, (1000, 1000))  # not enough CPU
    assert fragmentation(node, typical) == 2000
    wrong_model = TypicalTasks(((TaskShape(0, 0, 1, 1000, frozenset({"B"})), 1.0),))
    assert fragmentation(NodeShape("A", 8000, 0, (1000,)), wrong_model) == 1000


def test_cpu_only_tasks_count_every_free_gpu_as_fragment() -> None:
    typical = TypicalTasks(((CPU_ONLY, 1.0),))
    assert fragmentation(NodeShape("A", 8000, 0, (1000, 300)), typical) == 1300


def test_a_fully_used_node_has_no_fragmentation() -> None:
    typical = TypicalTasks(((WHOLE, 1.0),))
    assert fragmentation(NodeShape("A", 0, 0, (0, 0)), typical) == 0


def test_fits_checks_model_cpu_memory_and_gpu_shares() -> None:
    node = NodeShape("A", 4000, 100, (1000, 400))
    assert node.fits(TaskShape(4000, 100, 1, 400))
    assert not node.fits(TaskShape(4001, 0, 1, 400))
    assert not node.fits(TaskShape(0, 101, 1, 400))
    assert not node.fits(TaskShape(0, 0, 2, 1000))
    assert not node.fits(TaskShape(0, 0, 1, 500, frozenset({"B"})))
    assert node.fits(TaskShape(0, 0, 0, 0))


def test_invalid_task_shapes_are_rejected() -> None:
    with pytest.raises(ValueError):
        TaskShape(0, 0, 2, 500)
    with pytest.raises(ValueError):
        TaskShape(0, 0, 1, 0)
