from __future__ import annotations

import random

import pytest

from gpu_platform.domain.allocation import (
    ALIGNMENT_BYTES,
    AllocationFailed,
    BuddyAllocator,
    InvalidFree,
)
from gpu_platform.domain.errors import InvalidRequest

MIB = 1 << 20
GIB = 1 << 30


def test_a_fresh_power_of_two_arena_is_one_free_block() -> None:
    alloc = BuddyAllocator(80 * GIB // 5 * 4, 2 * MIB)  # 64 GiB
    assert alloc.largest_free_block == 64 * GIB
    assert alloc.stats().free_blocks == 1


def test_a_non_power_of_two_arena_starts_as_its_binary_decomposition() -> None:
    alloc = BuddyAllocator(80 * GIB, 2 * MIB)
    assert sorted(size for _, size in alloc.free_blocks()) == [16 * GIB, 64 * GIB]
    assert alloc.free_bytes == 80 * GIB
    alloc.check_invariants()


def test_a_request_is_rounded_up_to_a_power_of_two_multiple_of_the_minimum_block() -> None:
    alloc = BuddyAllocator(64 * MIB, 2 * MIB)
    off = alloc.allocate(5 * MIB)
    assert alloc.size_of(off) == 8 * MIB
    stats = alloc.stats()
    assert stats.allocated_bytes == 8 * MIB
    assert stats.requested_bytes == 5 * MIB
    assert stats.internal_fragmentation_bytes == 3 * MIB


def test_splitting_then_freeing_everything_coalesces_back_to_one_block() -> None:
    alloc = BuddyAllocator(64 * MIB, 2 * MIB)
    offs = [alloc.allocate(2 * MIB) for _ in range(32)]
    with pytest.raises(AllocationFailed):
        alloc.allocate(1)
    random.Random(7).shuffle(offs)
    for off in offs:
        alloc.free(off)
    assert list(alloc.free_blocks()) == [(0, 64 * MIB)]


def test_the_largest_request_that_fits_is_the_largest_free_block() -> None:
    alloc = BuddyAllocator(64 * MIB, 2 * MIB)
    alloc.allocate(2 * MIB)
    assert alloc.largest_free_block == 32 * MIB
    alloc.allocate(32 * MIB)
    with pytest.raises(AllocationFailed) as info:
        alloc.allocate(17 * MIB)
    assert info.value.largest_free == 16 * MIB


def test_external_fragmentation_index_reflects_scattered_free_space() -> None:
    alloc = BuddyAllocator(16 * MIB, 1 * MIB)
    offs = [alloc.allocate(MIB) for _ in range(16)]
    for off in offs[::2]:
        alloc.free(off)
    stats = alloc.stats()
    assert stats.free_bytes == 8 * MIB and stats.largest_free_block == MIB
    assert stats.external_fragmentation == pytest.approx(1 - 1 / 8)
    assert BuddyAllocator(16 * MIB, MIB).stats().external_fragmentation == 0.0


def test_a_double_free_is_rejected() -> None:
    alloc = BuddyAllocator(8 * MIB, MIB)
    off = alloc.allocate(MIB)
    alloc.free(off)
    with pytest.raises(InvalidFree):
        alloc.free(off)


def test_vendor_alignments_are_the_seed_figures_and_are_honoured() -> None:
    assert ALIGNMENT_BYTES == {"nvidia": 256, "amd": 4096, "intel": 64}
    for align in ALIGNMENT_BYTES.values():
        alloc = BuddyAllocator(1 << 20, align, align)
        for n in (1, align - 1, align + 1, 3 * align):
            assert alloc.allocate(n) % align == 0


@pytest.mark.parametrize(
    ("arena", "min_block", "alignment"),
    [(1000, 256, 256), (1 << 20, 300, 256), (1 << 20, 128, 256), (0, 256, 256), (1 << 20, 256, 3)],
)
def test_an_invalid_geometry_is_refused(arena: int, min_block: int, alignment: int) -> None:
    with pytest.raises(InvalidRequest):
        BuddyAllocator(arena, min_block, alignment)


def test_a_non_positive_request_is_refused() -> None:
    with pytest.raises(InvalidRequest):
        BuddyAllocator(1 << 20, 256).allocate(0)


def test_allocate_at_claims_exactly_the_named_block() -> None:
    alloc = BuddyAllocator(64 * MIB, 2 * MIB)
    alloc.allocate_at(40 * MIB, 2)  # 8 MiB at 40 MiB
    alloc.check_invariants()
    assert alloc.size_of(40 * MIB) == 8 * MIB
    with pytest.raises(AllocationFailed):
        alloc.allocate_at(40 * MIB, 0)
    with pytest.raises(InvalidRequest):
        alloc.allocate_at(3 * MIB, 0)


def test_a_snapshot_round_trips_into_an_identical_allocator() -> None:
    alloc = BuddyAllocator(80 * MIB, 2 * MIB)
    rng = random.Random(3)
    offs = [alloc.allocate(rng.randint(1, 9 * MIB)) for _ in range(6)]
    alloc.free(offs[2])
    copy = BuddyAllocator.from_snapshot(alloc.snapshot())
    assert copy.snapshot() == alloc.snapshot()
    assert copy.stats() == alloc.stats()
