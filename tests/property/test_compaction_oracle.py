"""plan_compaction against a brute-force oracle on small arenas: among all single-hop plans
(vacate one aligned window by moving each of its live blocks once, to an aligned free place
outside it), the planner finds one exactly when one exists, and moves the fewest bytes."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.allocation import (
    AllocationFailed,
    BuddyAllocator,
    CompactionPlan,
    plan_compaction,
)

UNIT = 256
UNITS = 16


def _fits(cells: list[bool], blocks: list[int], after: int = 0) -> bool:
    """Can blocks (sizes in units, largest first) go to distinct aligned all-free places?
    Backtracking; equal sizes take increasing starts (no symmetric retries)."""
    if not blocks:
        return True
    size, rest = blocks[0], blocks[1:]
    first = after if after % size == 0 else 0
    for start in range(first, len(cells), size):
        if not any(cells[start : start + size]):
            for c in range(start, start + size):
                cells[c] = True
            ok = _fits(cells, rest, start + size if rest and rest[0] == size else 0)
            for c in range(start, start + size):
                cells[c] = False
            if ok:
                return True
    return False


def _oracle(alloc: BuddyAllocator, size: int) -> int | None:
    """Fewest bytes any single-hop plan moves to free a block for `size`, or None."""
    block = alloc.block_size(size) // UNIT
    live = [(off // UNIT, sz // UNIT) for off, sz, _ in alloc.live()]
    best: int | None = None
    for w in range(0, UNITS - block + 1, block):
        inside = [sz for off, sz in live if w <= off < w + block]
        if any(sz >= block for off, sz in live if off <= w < off + sz):
            continue  # the window lies inside one live block (or is one)
        cells = [False] * UNITS
        for off, sz in live:
            if not w <= off < w + block:
                for c in range(off, off + sz):
                    cells[c] = True
        for c in range(w, w + block):
            cells[c] = True  # the window itself is reserved
        if _fits(cells, sorted(inside, reverse=True)):
            cost = sum(inside) * UNIT
            best = cost if best is None else min(best, cost)
    return best


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.integers(0, 2).map(bool), st.integers(1, 2 * UNIT)), min_size=8, max_size=40
    ),
    data=st.data(),
)
def test_the_planner_finds_the_cheapest_single_hop_plan_whenever_one_exists(
    ops: list[tuple[bool, int]], data: st.DataObject
) -> None:
    """Allocations twice as likely as frees, so arenas fill up and fragment."""
    alloc = BuddyAllocator(UNITS * UNIT, UNIT, UNIT)
    live: list[int] = []
    for do_alloc, n in ops:
        if do_alloc or not live:
            with contextlib.suppress(AllocationFailed):
                live.append(alloc.allocate(n))
        else:
            alloc.free(live.pop(n % len(live)))
    stats = alloc.stats()
    # mostly ask for more than the largest free block but no more than what is free
    lo = stats.largest_free_block + 1
    hi = max(lo, stats.free_bytes)
    want = data.draw(st.one_of(st.integers(lo, hi), st.integers(1, UNITS * UNIT)))
    plan = plan_compaction(alloc.snapshot(), want)
    expected = _oracle(alloc, want)
    if expected is None:
        assert not isinstance(plan, CompactionPlan)
    else:
        assert isinstance(plan, CompactionPlan)
        assert plan.moved_bytes == expected
