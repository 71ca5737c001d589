from __future__ import annotations

from gpu_platform.domain.allocation import (
    BuddyAllocator,
    CompactionPlan,
    NoCompaction,
    apply_plan,
    plan_compaction,
)

MIB = 1 << 20


def _checkerboard() -> tuple[BuddyAllocator, list[int]]:
    """16 MiB arena, 1 MiB blocks, every other one live: 8 MiB free, largest free 1 MiB."""
    alloc = BuddyAllocator(16 * MIB, MIB)
    offs = [alloc.allocate(MIB) for _ in range(16)]
    for off in offs[1::2]:
        alloc.free(off)
    return alloc, offs[0::2]


def test_no_moves_are_planned_when_a_large_enough_block_is_already_free() -> None:
    alloc = BuddyAllocator(16 * MIB, MIB)
    alloc.allocate(MIB)
    plan = plan_compaction(alloc.snapshot(), 8 * MIB)
    assert isinstance(plan, CompactionPlan) and plan.moves == ()
    assert plan.window == 8 * MIB


def test_a_fragmented_arena_gets_the_cheapest_plan_that_frees_the_block() -> None:
    alloc, _live = _checkerboard()
    plan = plan_compaction(alloc.snapshot(), 4 * MIB)
    assert isinstance(plan, CompactionPlan)
    assert plan.block == 4 * MIB
    assert len(plan.moves) == 2 and plan.moved_bytes == 2 * MIB  # a 4 MiB window holds 2 blocks
    apply_plan(alloc, plan)
    alloc.check_invariants()
    assert alloc.largest_free_block >= 4 * MIB
    assert alloc.allocate(4 * MIB) == plan.window


def test_half_the_arena_can_be_vacated_when_exactly_half_is_free() -> None:
    alloc, _ = _checkerboard()
    plan = plan_compaction(alloc.snapshot(), 8 * MIB)
    assert isinstance(plan, CompactionPlan) and plan.moved_bytes == 4 * MIB
    apply_plan(alloc, plan)
    assert alloc.allocate(8 * MIB) == plan.window


def test_no_plan_exists_when_too_few_bytes_are_free() -> None:
    alloc, _ = _checkerboard()
    plan = plan_compaction(alloc.snapshot(), 9 * MIB)
    assert isinstance(plan, NoCompaction)
    assert "free" in plan.reason


def test_a_request_larger_than_the_arena_has_no_plan() -> None:
    plan = plan_compaction(BuddyAllocator(16 * MIB, MIB).snapshot(), 17 * MIB)
    assert isinstance(plan, NoCompaction) and "larger than the arena" in plan.reason


def test_a_window_holding_a_block_as_large_as_itself_is_never_chosen() -> None:
    alloc = BuddyAllocator(16 * MIB, MIB)
    big = alloc.allocate(8 * MIB)
    small = [alloc.allocate(MIB) for _ in range(8)]
    for off in small[::2]:
        alloc.free(off)
    plan = plan_compaction(alloc.snapshot(), 8 * MIB)
    # only the other half could be a window, and its 4 live MiB cannot go anywhere
    assert isinstance(plan, NoCompaction)
    assert big == 0 or big == 8 * MIB
