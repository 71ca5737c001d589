"""Buddy allocator over an arena of N bytes: power-of-two blocks, split and coalesce.

Theory of operation. The arena `[0, arena_bytes)` is carved into blocks whose size is
`min_block << order`; a block of order k starts at a multiple of its own size (natural
alignment), so every block is aligned to `min_block`, which is itself a multiple of the vendor
alignment. An arena that is not a power-of-two multiple of `min_block` starts as several
top-level blocks (its binary decomposition, largest first), so no byte is wasted.

Free blocks are kept in one `set` of offsets per order plus a bitmask of non-empty orders, so:
- allocate: find the lowest non-empty order >= the wanted one with one bit trick, pop a block,
  split it down (each split pushes the upper half onto the free set of the order below);
- free: the buddy of the block at `off` of size `s` is at `off ^ s`; while the buddy is free at
  the same order, remove it and merge. Both are O(log(arena / min_block)) set operations with
  no scan. After every free the free blocks are fully coalesced (no two free buddies), which
  `check_invariants()` asserts.

Accounting is exact and O(1) to read: allocated bytes (block sizes), requested bytes,
internal fragmentation (their difference), free bytes, largest free block and an external
fragmentation index `1 - largest_free / free` (0 when free space is one block or none).

Offsets are arena-relative; an adapter adds its base address. The allocator is a plain mutable
object and not thread-safe: pool adapters hold a lock around it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from gpu_platform.domain.errors import DomainError, InvalidRequest

__all__ = [
    "ALIGNMENT_BYTES",
    "AllocationFailed",
    "BuddyAllocator",
    "BuddySnapshot",
    "BuddyStats",
    "InvalidFree",
    "order_for",
]

_ORDER_BITS = 6  # live blocks pack (requested bytes, order) into one int
_ORDER_MASK = (1 << _ORDER_BITS) - 1

#: Vendor alignment of device allocations in bytes (the seeds' figures).
ALIGNMENT_BYTES: dict[str, int] = {"nvidia": 256, "amd": 4096, "intel": 64}


class AllocationFailed(DomainError):
    """No free block is large enough; `largest_free` says what is (bytes)."""

    def __init__(self, requested: int, block: int, largest_free: int) -> None:
        super().__init__(
            f"cannot allocate {requested} bytes (block {block}): largest free block is "
            f"{largest_free} bytes"
        )
        self.requested = requested
        self.block = block
        self.largest_free = largest_free


class InvalidFree(DomainError):
    """`free` of an offset that is not the start of a live block (double free, bad pointer)."""

    def __init__(self, offset: int) -> None:
        super().__init__(f"offset {offset} is not a live block")
        self.offset = offset


def _is_pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def order_for(nbytes: int, min_block: int) -> int:
    """The order of the smallest block of `min_block << order` bytes holding `nbytes`."""
    units = (nbytes + min_block - 1) // min_block
    return (units - 1).bit_length() if units > 1 else 0


@dataclass(frozen=True, slots=True)
class BuddyStats:
    """Exact accounting in bytes. `external_fragmentation` is `1 - largest_free / free_bytes`."""

    arena_bytes: int
    allocated_bytes: int
    requested_bytes: int
    free_bytes: int
    largest_free_block: int
    live_blocks: int
    free_blocks: int

    @property
    def internal_fragmentation_bytes(self) -> int:
        return self.allocated_bytes - self.requested_bytes

    @property
    def external_fragmentation(self) -> float:
        if self.free_bytes == 0:
            return 0.0
        return 1.0 - self.largest_free_block / self.free_bytes


@dataclass(frozen=True, slots=True)
class BuddySnapshot:
    """A frozen picture of an allocator: live blocks as (offset, order, requested bytes) and
    free blocks as (offset, order), both sorted by offset. Input of pure planners."""

    arena_bytes: int
    min_block: int
    alignment: int
    live: tuple[tuple[int, int, int], ...]
    free: tuple[tuple[int, int], ...]


class BuddyAllocator:
    """Binary buddy allocator; see the module docstring for the invariants it keeps."""

    __slots__ = (
        "_alignment",
        "_allocated",
        "_arena",
        "_free",
        "_live",
        "_mask",
        "_max_order",
        "_min",
        "_min_shift",
        "_requested",
    )

    def __init__(self, arena_bytes: int, min_block: int, alignment: int = 256) -> None:
        if not _is_pow2(alignment):
            raise InvalidRequest("alignment", f"must be a power of two, got {alignment}")
        if not _is_pow2(min_block):
            raise InvalidRequest("min_block", f"must be a power of two, got {min_block}")
        if min_block < alignment:
            raise InvalidRequest(
                "min_block", f"{min_block} is smaller than the alignment {alignment}"
            )
        if arena_bytes <= 0 or arena_bytes % min_block:
            raise InvalidRequest(
                "arena_bytes", f"{arena_bytes} is not a positive multiple of {min_block}"
            )
        self._arena = arena_bytes
        self._min = min_block
        self._min_shift = min_block.bit_length() - 1
        self._alignment = alignment
        self._max_order = (arena_bytes // min_block).bit_length() - 1
        self._free: list[set[int]] = [set() for _ in range(self._max_order + 1)]
        self._mask = 0
        self._live: dict[int, int] = {}  # offset -> requested << _ORDER_BITS | order
        self._allocated = 0
        self._requested = 0
        offset = 0
        for order in range(self._max_order, -1, -1):
            size = min_block << order
            if offset + size <= arena_bytes:
                self._free[order].add(offset)
                self._mask |= 1 << order
                offset += size
        assert offset == arena_bytes

    # -- properties ---------------------------------------------------------------------------

    @property
    def arena_bytes(self) -> int:
        return self._arena

    @property
    def min_block(self) -> int:
        return self._min

    @property
    def alignment(self) -> int:
        return self._alignment

    @property
    def max_order(self) -> int:
        return self._max_order

    @property
    def free_bytes(self) -> int:
        return self._arena - self._allocated

    @property
    def largest_free_block(self) -> int:
        mask = self._mask
        return self._min << (mask.bit_length() - 1) if mask else 0

    def block_size(self, nbytes: int) -> int:
        """Bytes of the block that `allocate(nbytes)` would return."""
        return self._min << order_for(max(nbytes, 1), self._min)

    # -- the hot path -------------------------------------------------------------------------

    def allocate(self, nbytes: int) -> int:
        """Offset of a fresh block of at least `nbytes` bytes, aligned to its own size.

        Raises InvalidRequest for nbytes <= 0, AllocationFailed when no block is large enough.
        """
        if nbytes <= 0:
            raise InvalidRequest("nbytes", f"must be positive, got {nbytes}")
        units = (nbytes + self._min - 1) >> self._min_shift
        order = (units - 1).bit_length() if units > 1 else 0
        mask = self._mask
        above = mask >> order
        if not above:
            raise AllocationFailed(nbytes, self._min << order, self.largest_free_block)
        j = order + (above & -above).bit_length() - 1
        free = self._free
        level = free[j]
        offset = level.pop()
        if not level:
            mask ^= 1 << j
        if j > order:
            # push the upper halves of every split onto orders order..j-1 (all non-empty now)
            half = self._min << order
            for k in range(order, j):
                free[k].add(offset + half)
                half <<= 1
            mask |= (1 << j) - (1 << order)
        self._mask = mask
        self._live[offset] = (nbytes << _ORDER_BITS) | order
        self._allocated += self._min << order
        self._requested += nbytes
        return offset

    def free(self, offset: int) -> None:
        """Return the block at `offset` and coalesce it with free buddies. InvalidFree if the
        offset is not a live block."""
        packed = self._live.pop(offset, None)
        if packed is None:
            raise InvalidFree(offset)
        order = packed & _ORDER_MASK
        size = self._min << order
        self._requested -= packed >> _ORDER_BITS
        self._allocated -= size
        free = self._free
        top = self._max_order
        mask = self._mask
        while order < top:
            level = free[order]
            buddy = offset ^ size
            if buddy not in level:
                break
            level.remove(buddy)
            if not level:
                mask ^= 1 << order
            offset &= ~size
            size <<= 1
            order += 1
        free[order].add(offset)
        self._mask = mask | (1 << order)

    # -- targeted operations (compaction) -----------------------------------------------------

    def allocate_at(self, offset: int, order: int, requested: int | None = None) -> None:
        """Claim the specific block `[offset, offset + (min_block << order))`, which must lie
        entirely in free space. Raises AllocationFailed if any part of it is not free."""
        size = self._min << order
        if order < 0 or order > self._max_order or offset % size or offset + size > self._arena:
            raise InvalidRequest("offset", f"{offset} is not a block of order {order}")
        j = order
        while j <= self._max_order:
            start = offset & ~((self._min << j) - 1)
            if start in self._free[j]:
                break
            j += 1
        else:
            raise AllocationFailed(size, size, self.largest_free_block)
        self._free[j].remove(start)
        if not self._free[j]:
            self._mask ^= 1 << j
        while j > order:
            j -= 1
            half = self._min << j
            if offset & half:
                self._free[j].add(start)
                start += half
            else:
                self._free[j].add(start + half)
            self._mask |= 1 << j
        req = size if requested is None else requested
        self._live[offset] = (req << _ORDER_BITS) | order
        self._allocated += size
        self._requested += req

    # -- introspection ------------------------------------------------------------------------

    def live(self) -> Iterator[tuple[int, int, int]]:
        """Live blocks as (offset, size bytes, requested bytes), in no particular order."""
        for off, packed in self._live.items():
            yield off, self._min << (packed & _ORDER_MASK), packed >> _ORDER_BITS

    def free_blocks(self) -> Iterator[tuple[int, int]]:
        """Free blocks as (offset, size bytes), in no particular order."""
        for order, level in enumerate(self._free):
            for off in level:
                yield off, self._min << order

    def size_of(self, offset: int) -> int:
        """Block size in bytes of the live block at `offset` (InvalidFree if none)."""
        packed = self._live.get(offset)
        if packed is None:
            raise InvalidFree(offset)
        return self._min << (packed & _ORDER_MASK)

    def stats(self) -> BuddyStats:
        return BuddyStats(
            arena_bytes=self._arena,
            allocated_bytes=self._allocated,
            requested_bytes=self._requested,
            free_bytes=self._arena - self._allocated,
            largest_free_block=self.largest_free_block,
            live_blocks=len(self._live),
            free_blocks=sum(len(level) for level in self._free),
        )

    def snapshot(self) -> BuddySnapshot:
        return BuddySnapshot(
            arena_bytes=self._arena,
            min_block=self._min,
            alignment=self._alignment,
            live=tuple(
                sorted((off, p & _ORDER_MASK, p >> _ORDER_BITS) for off, p in self._live.items())
            ),
            free=tuple(sorted((off, o) for o, level in enumerate(self._free) for off in level)),
        )

    @classmethod
    def from_snapshot(cls, snap: BuddySnapshot) -> BuddyAllocator:
        """An allocator in exactly the state `snap` describes (live blocks re-claimed)."""
        alloc = cls(snap.arena_bytes, snap.min_block, snap.alignment)
        for off, order, req in snap.live:
            alloc.allocate_at(off, order, req)
        return alloc

    def check_invariants(self) -> None:
        """Assert every structural invariant; O(blocks). For tests and debugging."""
        spans: list[tuple[int, int, str]] = []
        mask = 0
        for order, level in enumerate(self._free):
            size = self._min << order
            if level:
                mask |= 1 << order
            for off in level:
                assert off % size == 0, f"free block {off} misaligned for order {order}"
                assert off + size <= self._arena, f"free block {off} beyond arena"
                if order < self._max_order:
                    assert (off ^ size) not in level, f"free buddies {off} not coalesced"
                spans.append((off, size, "free"))
        assert mask == self._mask, "order mask out of sync"
        allocated = requested = 0
        for off, packed in self._live.items():
            order = packed & _ORDER_MASK
            size = self._min << order
            req = packed >> _ORDER_BITS
            assert off % size == 0 and off % self._alignment == 0, f"live {off} misaligned"
            assert 0 < req <= size, f"live {off} requested {req} outside block {size}"
            allocated += size
            requested += req
            spans.append((off, size, "live"))
        spans.sort()
        cursor = 0
        for off, size, _kind in spans:
            assert off == cursor, f"gap or overlap at {cursor} (next block at {off})"
            cursor = off + size
        assert cursor == self._arena, "blocks do not tile the arena"
        assert allocated == self._allocated and requested == self._requested
