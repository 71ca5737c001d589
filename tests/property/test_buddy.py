"""The buddy allocator against a brute-force model: a bitmap of the arena, one cell per
minimum block, plus the list of live allocations."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from gpu_platform.domain.allocation import (
    AllocationFailed,
    BuddyAllocator,
    InvalidFree,
    NoCompaction,
    apply_plan,
    plan_compaction,
)


class BuddyAgainstBitmap(RuleBasedStateMachine):
    @initialize(
        units=st.integers(1, 48),
        min_shift=st.sampled_from([6, 8, 12]),
        align_shift=st.sampled_from([6, 8]),
    )
    def setup(self, units: int, min_shift: int, align_shift: int) -> None:
        self.min_block = 1 << max(min_shift, align_shift)
        self.alignment = 1 << align_shift
        self.arena = units * self.min_block
        self.alloc = BuddyAllocator(self.arena, self.min_block, self.alignment)
        self.bitmap = [False] * units
        self.live: dict[int, tuple[int, int]] = {}  # offset -> (block size, requested)

    def _mark(self, offset: int, size: int, value: bool) -> None:
        first = offset // self.min_block
        for cell in range(first, first + size // self.min_block):
            assert self.bitmap[cell] != value, "overlap with a live block"
            self.bitmap[cell] = value

    @rule(data=st.data())
    def allocate(self, data: st.DataObject) -> None:
        nbytes = data.draw(st.integers(1, self.arena + self.min_block))
        block = self.alloc.block_size(nbytes)
        # The model: a block of that size is possible iff some aligned window is all free.
        cells = block // self.min_block
        possible = any(
            not any(self.bitmap[w : w + cells])
            for w in range(0, len(self.bitmap) - cells + 1, cells)
        )
        try:
            offset = self.alloc.allocate(nbytes)
        except AllocationFailed:
            assert not possible, f"refused {nbytes} B although an aligned window was free"
            return
        assert possible
        assert offset % block == 0 and offset % self.alignment == 0
        assert block >= nbytes and block < 2 * max(nbytes, self.min_block)
        assert offset + block <= self.arena
        self._mark(offset, block, True)
        self.live[offset] = (block, nbytes)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        offset = data.draw(st.sampled_from(sorted(self.live)))
        block, _ = self.live.pop(offset)
        self.alloc.free(offset)
        self._mark(offset, block, False)

    @rule(offset=st.integers(0, 1 << 20))
    def free_of_a_non_live_offset_is_rejected(self, offset: int) -> None:
        if offset in self.live:
            return
        try:
            self.alloc.free(offset)
        except InvalidFree:
            return
        raise AssertionError("free of a non-live offset was accepted")

    @rule(data=st.data())
    def compaction_plan_is_valid(self, data: st.DataObject) -> None:
        size = data.draw(st.integers(1, self.arena))
        snap = self.alloc.snapshot()
        plan = plan_compaction(snap, size)
        block = self.alloc.block_size(size)
        free_bytes = self.arena - sum(b for b, _ in self.live.values())
        if isinstance(plan, NoCompaction):
            assert block > self.alloc.largest_free_block
            return
        assert plan.block == block and plan.window % block == 0
        window = range(plan.window, plan.window + block)
        live_now = {off: b for off, (b, _) in self.live.items()}
        srcs = {m.src for m in plan.moves}
        assert srcs == {off for off in live_now if off in window}
        assert plan.moved_bytes <= free_bytes
        # destinations: outside the window, free now, pairwise disjoint
        taken = list(self.bitmap)
        for m in plan.moves:
            assert m.size == live_now[m.src] and m.dst % m.size == 0
            assert m.dst + m.size <= plan.window or m.dst >= plan.window + block
            for cell in range(m.dst // self.min_block, (m.dst + m.size) // self.min_block):
                assert not taken[cell], "move lands on occupied memory"
                taken[cell] = True
        # carrying it out on a copy makes the block allocatable
        copy = BuddyAllocator.from_snapshot(snap)
        apply_plan(copy, plan)
        copy.check_invariants()
        assert copy.stats().requested_bytes == self.alloc.stats().requested_bytes
        assert copy.allocate(size) % block == 0

    @invariant()
    def accounting_matches_the_model(self) -> None:
        self.alloc.check_invariants()
        stats = self.alloc.stats()
        used = sum(self.bitmap) * self.min_block
        assert stats.allocated_bytes == used
        assert stats.requested_bytes == sum(r for _, r in self.live.values())
        assert stats.free_bytes == self.arena - used
        assert stats.internal_fragmentation_bytes == used - stats.requested_bytes
        assert stats.live_blocks == len(self.live)
        largest = max((b for _, b in self.alloc.free_blocks()), default=0)
        assert stats.largest_free_block == largest
        if stats.free_bytes:
            assert stats.external_fragmentation == 1 - largest / stats.free_bytes

    def teardown(self) -> None:
        for offset in list(self.live):
            self.alloc.free(offset)
        self.alloc.check_invariants()
        # fully coalesced: the arena is back to its initial top-level blocks
        fresh = BuddyAllocator(self.arena, self.min_block, self.alignment)
        assert sorted(self.alloc.free_blocks()) == sorted(fresh.free_blocks())
        if self.arena & (self.arena - 1) == 0 and self.arena // self.min_block:
            assert self.alloc.largest_free_block == self.arena


BuddyAgainstBitmap.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestBuddyAgainstBitmap = BuddyAgainstBitmap.TestCase
