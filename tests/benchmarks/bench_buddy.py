"""Buddy allocator: alloc+free latency on an 80 GiB arena (2 MiB minimum block) under random
sizes, and the external fragmentation index after a long random workload, each beside a
first-fit address-ordered free-list baseline measured in the same run on the same sequence.

Workloads: sizes log-uniform in [256 B, 4 GiB] ("mixed": ~150 live blocks) and in
[256 B, 64 MiB] ("many_small": thousands of live blocks, long free lists). The arena is
first filled to about 60 % with live blocks; then each step frees a random live block and
allocates a new random size (a refused allocation is counted, not retried). One sample is
one allocate + one free, in microseconds, timed with perf_counter_ns. The baseline rounds
requests to the same 2 MiB granularity (no power-of-two rounding), takes the lowest-address
hole that fits by scanning, and coalesces neighbours on free via bisect.
"""

from __future__ import annotations

import bisect
import math
import random
import time
from typing import Any

from _harness import baseline, result, time_calls

from gpu_platform.domain.allocation import AllocationFailed, BuddyAllocator

GIB = 1 << 30
MIB = 1 << 20
ARENA = 80 * GIB
MIN_BLOCK = 2 * MIB


class FirstFit:
    """Address-ordered free list of holes (parallel lists), first fit, coalescing on free."""

    def __init__(self, arena: int, granule: int) -> None:
        self.granule = granule
        self.starts: list[int] = [0]
        self.sizes: list[int] = [arena]
        self.live: dict[int, int] = {}
        self.arena = arena

    def allocate(self, nbytes: int) -> int:
        g = self.granule
        size = (nbytes + g - 1) // g * g
        sizes = self.sizes
        for i, hole in enumerate(sizes):
            if hole >= size:
                off = self.starts[i]
                if hole == size:
                    del self.starts[i]
                    del sizes[i]
                else:
                    self.starts[i] = off + size
                    sizes[i] = hole - size
                self.live[off] = size
                return off
        raise MemoryError(nbytes)

    def free(self, off: int) -> None:
        size = self.live.pop(off)
        starts, sizes = self.starts, self.sizes
        i = bisect.bisect_left(starts, off)
        if i < len(starts) and off + size == starts[i]:  # merge with the next hole
            size += sizes[i]
            del starts[i]
            del sizes[i]
        if i > 0 and starts[i - 1] + sizes[i - 1] == off:  # merge with the previous hole
            sizes[i - 1] += size
        else:
            starts.insert(i, off)
            sizes.insert(i, size)

    def fragmentation(self) -> float:
        free = sum(self.sizes)
        return 1.0 - max(self.sizes, default=0) / free if free else 0.0

    def free_bytes(self) -> int:
        return sum(self.sizes)


def _sizes(rng: random.Random, n: int, lo_b: int, hi_b: int) -> list[int]:
    lo, hi = math.log(lo_b), math.log(hi_b)
    return [int(math.exp(rng.uniform(lo, hi))) for _ in range(n)]


def _run(make: Any, sizes: list[int], victims: list[float], fill: float) -> dict[str, Any]:
    alloc = make()
    live: list[int] = []
    it = iter(sizes)
    used = 0
    for nbytes in it:  # fill phase, untimed
        try:
            live.append(alloc.allocate(nbytes))
        except (AllocationFailed, MemoryError):
            continue
        used += nbytes
        if used >= fill * ARENA:
            break
    samples: list[float] = []
    failures = 0
    clock = time.perf_counter_ns
    allocate, free = alloc.allocate, alloc.free
    for nbytes, v in zip(it, victims, strict=False):
        k = int(v * len(live))
        victim = live[k]
        t0 = clock()
        try:
            off = allocate(nbytes)
        except (AllocationFailed, MemoryError):
            off = -1
        free(victim)
        t1 = clock()
        samples.append((t1 - t0) / 1000.0)
        if off < 0:
            failures += 1
            live[k] = live[-1]
            live.pop()
            if not live:
                break
        else:
            live[k] = off
    return {"alloc": alloc, "samples": samples, "failures": failures, "live": len(live)}


WORKLOADS = {
    # name: (smallest, largest request in bytes)
    "mixed": (256, 4 * GIB),
    "many_small": (256, 64 * MIB),
}


def run(quick: bool) -> list[dict[str, Any]]:
    rows = [_workload(name, lo, hi, quick) for name, (lo, hi) in WORKLOADS.items()]
    rows.append(_worst_case(quick))
    rows.append(_pool(quick))
    return rows


def _worst_case(quick: bool) -> dict[str, Any]:
    """The longest path: a minimum-size block from an empty 80 GiB arena (15 splits) freed at
    once (15 merges back to the 64 GiB top block)."""
    alloc = BuddyAllocator(ARENA, MIN_BLOCK, 256)
    first = FirstFit(ARENA, MIN_BLOCK)
    n = 20_000 if quick else 200_000

    def buddy_pair() -> None:
        alloc.free(alloc.allocate(1000))

    def first_pair() -> None:
        first.free(first.allocate(1000))

    samples = time_calls(buddy_pair, n)
    base = result("first_fit", {}, time_calls(first_pair, n))
    return result(
        "buddy.alloc_free",
        {
            "workload": "worst_case",
            "arena_gib": 80,
            "min_block_mib": 2,
            "steps": n,
            "sizes": "1000 B on an empty arena",
        },
        samples,
        baseline=baseline("first-fit free list", base),
    )


def _pool(quick: bool) -> dict[str, Any]:
    """The DeviceMemoryPool port's own cost (lock, block object, context manager) over the
    host-memory arena, beside the bare buddy allocator on the same sequence."""
    from gpu_platform.adapters.outbound.hostmem import HostMemoryPool

    arena, min_block = 1 << 30, 64 << 10
    steps = 20_000 if quick else 200_000
    rng = random.Random(7)
    sizes = _sizes(rng, steps, 256, 8 * MIB)
    pool = HostMemoryPool(arena, min_block)
    bare = BuddyAllocator(arena, min_block, 256)
    clock = time.perf_counter_ns
    pool_samples: list[float] = []
    bare_samples: list[float] = []
    try:
        for nbytes in sizes:
            t0 = clock()
            with pool.allocate(nbytes) as block:
                pass
            t1 = clock()
            off = bare.allocate(nbytes)
            bare.free(off)
            t2 = clock()
            pool_samples.append((t1 - t0) / 1000.0)
            bare_samples.append((t2 - t1) / 1000.0)
            del block
    finally:
        pool.close()
    base = result("bare", {}, bare_samples)
    return result(
        "memory_pool.allocate_release",
        {"arena_gib": 1, "min_block_kib": 64, "steps": steps, "sizes": "log-uniform 256B..8MiB"},
        pool_samples,
        baseline=baseline("bare BuddyAllocator", base),
    )


def _workload(name: str, lo: int, hi: int, quick: bool) -> dict[str, Any]:
    steps = 20_000 if quick else 200_000
    rng = random.Random(20261121)
    sizes = _sizes(rng, steps + 100_000, lo, hi)
    victims = [rng.random() for _ in range(steps)]
    fill = 0.6
    buddy = _run(lambda: BuddyAllocator(ARENA, MIN_BLOCK, 256), sizes, victims, fill)
    first = _run(lambda: FirstFit(ARENA, MIN_BLOCK), sizes, victims, fill)
    bstats = buddy["alloc"].stats()
    base = result("first_fit", {}, first["samples"])
    base_obj = baseline(
        "first-fit free list",
        base,
        fragmentation_index=round(first["alloc"].fragmentation(), 4),
        failed_allocations=first["failures"],
    )
    params = {
        "workload": name,
        "arena_gib": 80,
        "min_block_mib": 2,
        "steps": len(buddy["samples"]),
        "sizes": f"log-uniform {lo}B..{hi // MIB}MiB",
    }
    return result(
        "buddy.alloc_free",
        params,
        buddy["samples"],
        baseline=base_obj,
        extra={
            "fragmentation_index": round(bstats.external_fragmentation, 4),
            "internal_fragmentation_bytes": bstats.internal_fragmentation_bytes,
            "failed_allocations": buddy["failures"],
            "live_blocks": bstats.live_blocks,
            "largest_free_gib": round(bstats.largest_free_block / GIB, 3),
            "free_gib": round(bstats.free_bytes / GIB, 3),
            "first_fit_free_gib": round(first["alloc"].free_bytes() / GIB, 3),
            "first_fit_live_blocks": len(first["alloc"].live),
        },
    )
