"""Contract of the DeviceMemoryPool port. Subclass `MemoryPoolContract` as `Test<Adapter>` and
implement `make_pool(arena_bytes, min_block)`; every adapter and fake must pass it unchanged.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_platform.ports.outbound.memory_pool import (
    DeviceMemoryPool,
    InvalidBlock,
    MemoryBlock,
    PoolClosed,
    PoolExhausted,
)

__all__ = ["MemoryPoolContract"]

KIB = 1 << 10
ARENA = 1 << 20  # 1 MiB
MIN_BLOCK = 4 * KIB


class MemoryPoolContract:
    def make_pool(self, arena_bytes: int, min_block: int) -> DeviceMemoryPool:
        raise NotImplementedError

    @pytest.fixture
    def pool(self) -> Iterator[DeviceMemoryPool]:
        pool = self.make_pool(ARENA, MIN_BLOCK)
        yield pool
        pool.close()

    def _base(self, pool: DeviceMemoryPool) -> int:
        with pool.allocate(ARENA) as whole:
            return whole.device_ptr

    def test_a_block_is_aligned_inside_the_arena_and_at_least_as_large_as_asked(
        self, pool: DeviceMemoryPool
    ) -> None:
        base = self._base(pool)
        for n in (1, 100, MIN_BLOCK, MIN_BLOCK + 1, 50 * KIB):
            block = pool.allocate(n)
            assert block.nbytes == n and block.size >= n
            assert block.device_ptr % pool.alignment == 0
            assert base <= block.device_ptr
            assert block.device_ptr + block.size <= base + pool.arena_bytes
            block.release()

    def test_bytes_written_to_a_block_read_back_and_live_blocks_never_share_bytes(
        self, pool: DeviceMemoryPool
    ) -> None:
        blocks: list[MemoryBlock] = []
        for i in range(40):
            block = pool.allocate(1 + (i * 997) % (12 * KIB))
            pool.write(block, bytes([i]) * block.size)
            blocks.append(block)
        for i, block in enumerate(blocks):
            assert pool.read(block, block.size) == bytes([i]) * block.size
        spans = sorted((b.device_ptr, b.device_ptr + b.size) for b in blocks)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))

    def test_leaving_the_with_block_returns_its_memory(self, pool: DeviceMemoryPool) -> None:
        with pool.allocate(10 * KIB) as block:
            assert pool.stats().allocated_bytes == block.size
            assert pool.stats().requested_bytes == 10 * KIB
        assert pool.stats().allocated_bytes == 0
        assert pool.stats().largest_free_block == ARENA

    def test_releasing_a_block_twice_is_an_invalid_block(self, pool: DeviceMemoryPool) -> None:
        block = pool.allocate(KIB)
        block.release()
        with pytest.raises(InvalidBlock):
            block.release()
        with pytest.raises(InvalidBlock):
            pool.read(block, 1)

    def test_a_stale_block_cannot_release_the_block_that_reused_its_memory(
        self, pool: DeviceMemoryPool
    ) -> None:
        old = pool.allocate(KIB)
        old.release()
        new = pool.allocate(KIB)
        with pytest.raises(InvalidBlock):
            old.release()
        assert pool.stats().live_blocks == 1
        new.release()

    def test_a_request_beyond_the_largest_free_block_is_exhausted(
        self, pool: DeviceMemoryPool
    ) -> None:
        held = pool.allocate(MIN_BLOCK)
        with pytest.raises(PoolExhausted) as info:
            pool.allocate(ARENA)
        assert info.value.largest_free == ARENA // 2
        held.release()

    def test_copies_outside_a_block_are_refused(self, pool: DeviceMemoryPool) -> None:
        with pool.allocate(MIN_BLOCK) as block:
            with pytest.raises(InvalidBlock):
                pool.write(block, b"x" * (block.size + 1))
            with pytest.raises(InvalidBlock):
                pool.read(block, 8, offset=block.size - 4)
            pool.write(block, b"tail", offset=block.size - 4)
            assert pool.read(block, 4, offset=block.size - 4) == b"tail"

    def test_close_is_idempotent_and_the_pool_is_unusable_afterwards(self) -> None:
        pool = self.make_pool(ARENA, MIN_BLOCK)
        block = pool.allocate(KIB)
        pool.close()
        pool.close()
        with pytest.raises(PoolClosed):
            pool.allocate(KIB)
        with pytest.raises(PoolClosed):
            block.release()

    def test_freeing_everything_coalesces_the_arena_back_into_one_block(
        self, pool: DeviceMemoryPool
    ) -> None:
        blocks = []
        while True:
            try:
                blocks.append(pool.allocate(MIN_BLOCK))
            except PoolExhausted:
                break
        assert len(blocks) == ARENA // MIN_BLOCK
        random.Random(1).shuffle(blocks)
        for block in blocks:
            block.release()
        stats = pool.stats()
        assert stats.free_blocks == 1 and stats.largest_free_block == ARENA

    def test_threads_allocating_at_once_never_get_overlapping_blocks(
        self, pool: DeviceMemoryPool
    ) -> None:
        got: list[MemoryBlock] = []
        lock = threading.Lock()

        def worker() -> None:
            for _ in range(20):
                block = pool.allocate(MIN_BLOCK)
                with lock:
                    got.append(block)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len({b.device_ptr for b in got}) == 80
        for b in got:
            b.release()
        assert pool.stats().allocated_bytes == 0

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(ops=st.lists(st.tuples(st.booleans(), st.integers(1, 64 * KIB)), max_size=40))
    def test_random_workloads_keep_every_live_blocks_bytes_intact(
        self, ops: list[tuple[bool, int]]
    ) -> None:
        pool = self.make_pool(ARENA, MIN_BLOCK)
        try:
            live: list[tuple[MemoryBlock, bytes]] = []
            for i, (alloc, n) in enumerate(ops):
                if alloc or not live:
                    try:
                        block = pool.allocate(n)
                    except PoolExhausted:
                        assert pool.stats().largest_free_block < n
                        continue
                    pattern = bytes([i % 251 + 1]) * n
                    pool.write(block, pattern)
                    live.append((block, pattern))
                else:
                    block, pattern = live.pop(n % len(live))
                    block.release()
                for block, pattern in live:
                    assert pool.read(block, len(pattern)) == pattern
            assert pool.stats().live_blocks == len(live)
        finally:
            pool.close()
