"""Compaction plan: which live blocks to move where so that a block of a given size frees up.

Theory of operation. A block of `size` bytes can only ever appear as an aligned window
`[w, w + block)` where `block = block_size(size)` and `w % block == 0`. For every window that
holds no live block of order >= its own (such a block cannot move out of a smaller window
without an equally large hole elsewhere, and a live block as large as the window IS the
window), the cost is the bytes of live blocks inside it. Windows are tried cheapest first
(ties: fewer blocks, lower address); for each, a copy of the allocator frees the window's live
blocks, claims the window itself, then re-allocates the displaced blocks largest first. The
first window for which every displaced block finds a new home gives the plan.

Every destination lies in space that was free before the plan (the window is claimed, so a
displaced block can never land inside it), hence the moves are independent and can be carried
out in any order, each as one copy. `plan_compaction` is a pure function of a frozen snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_platform.domain.allocation.buddy import (
    AllocationFailed,
    BuddyAllocator,
    BuddySnapshot,
    order_for,
)
from gpu_platform.domain.errors import InvalidRequest

__all__ = ["CompactionPlan", "Move", "NoCompaction", "apply_plan", "plan_compaction"]


@dataclass(frozen=True, slots=True)
class Move:
    """Move the live block at `src` (of `size` bytes) to `dst`; offsets in bytes."""

    src: int
    dst: int
    size: int


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """Moves that make `[window, window + block)` one free block of `block` bytes.

    `moves` is empty when such a block is already free. `moved_bytes` is what must be copied.
    """

    requested: int
    window: int
    block: int
    moves: tuple[Move, ...]

    @property
    def moved_bytes(self) -> int:
        return sum(m.size for m in self.moves)


@dataclass(frozen=True, slots=True)
class NoCompaction:
    """No plan exists; `reason` says why (not enough free bytes, or no window can be vacated)."""

    requested: int
    reason: str


def plan_compaction(snap: BuddySnapshot, size: int) -> CompactionPlan | NoCompaction:
    """A plan that makes a block of at least `size` bytes free, moving the fewest bytes among
    the windows this heuristic can vacate; or NoCompaction with a reason."""
    if size <= 0:
        raise InvalidRequest("size", f"must be positive, got {size}")
    order = order_for(size, snap.min_block)
    block = snap.min_block << order
    if block > snap.arena_bytes or (snap.arena_bytes // snap.min_block).bit_length() - 1 < order:
        return NoCompaction(size, f"a block of {block} bytes is larger than the arena")
    for off, o in snap.free:
        if o >= order:
            window = off  # a free block of that order or larger already exists
            return CompactionPlan(size, window, block, ())
    live_bytes = sum(snap.min_block << o for _, o, _ in snap.live)
    free_bytes = snap.arena_bytes - live_bytes
    if free_bytes < block:
        return NoCompaction(size, f"only {free_bytes} bytes free, a block needs {block}")
    # Cost per window: live bytes inside; windows holding a block of order >= `order` excluded.
    cost: dict[int, list[int]] = {}
    blocked: set[int] = set()
    for off, o, _ in snap.live:
        w = off - off % block
        if o >= order:
            blocked.add(w)
            continue
        entry = cost.setdefault(w, [0, 0])
        entry[0] += snap.min_block << o
        entry[1] += 1
    windows = [
        (c[0], c[1], w)
        for w, c in cost.items()
        if w not in blocked and w + block <= snap.arena_bytes and _inside_tiling(snap, w, order)
    ]
    windows.sort()
    for _, _, w in windows:
        plan = _try_window(snap, w, order)
        if plan is not None:
            return CompactionPlan(size, w, block, plan)
    return NoCompaction(size, "no aligned window can be vacated into the remaining free space")


def _inside_tiling(snap: BuddySnapshot, window: int, order: int) -> bool:
    """True when the window is a block of the arena's buddy tiling (not straddling two
    top-level blocks of a non-power-of-two arena)."""
    offset = 0
    top = (snap.arena_bytes // snap.min_block).bit_length() - 1
    for o in range(top, -1, -1):
        size = snap.min_block << o
        if offset + size <= snap.arena_bytes:
            if offset <= window < offset + size:
                return o >= order
            offset += size
    return False


def _try_window(snap: BuddySnapshot, window: int, order: int) -> tuple[Move, ...] | None:
    sim = BuddyAllocator.from_snapshot(snap)
    block = snap.min_block << order
    displaced = [
        (snap.min_block << o, off, req)
        for off, o, req in snap.live
        if window <= off < window + block
    ]
    for _, off, _ in displaced:
        sim.free(off)
    sim.allocate_at(window, order)
    displaced.sort(key=lambda d: (-d[0], d[1]))
    moves: list[Move] = []
    for sz, off, _req in displaced:
        try:
            dst = sim.allocate(sz)
        except AllocationFailed:
            return None
        moves.append(Move(off, dst, sz))
    return tuple(moves)


def apply_plan(alloc: BuddyAllocator, plan: CompactionPlan) -> None:
    """Carry out `plan`'s moves in the allocator's books (the caller copies the bytes).

    Afterwards the window is one free block of `plan.block` bytes (possibly coalesced into a
    larger one). Requested sizes travel with their blocks.
    """
    requested = {off: req for off, _size, req in alloc.live()}
    min_block = alloc.min_block
    for move in plan.moves:
        req = requested[move.src]
        alloc.free(move.src)
        alloc.allocate_at(move.dst, order_for(move.size, min_block), req)
