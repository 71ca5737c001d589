"""Shared building block of the device-memory pool adapters: a buddy allocator over one arena
at `base`, a lock, and blocks that release themselves. Subclasses supply the arena and how
bytes are copied in and out (host memmove, cuMemcpy...).
"""

from __future__ import annotations

import threading
from types import TracebackType

from gpu_platform.domain.allocation.buddy import AllocationFailed, BuddyAllocator, BuddyStats
from gpu_platform.domain.errors import InvalidRequest
from gpu_platform.ports.outbound.memory_pool import (
    InvalidBlock,
    MemoryBlock,
    PoolClosed,
    PoolError,
    PoolExhausted,
)

__all__ = ["BuddyPool", "PoolBlock"]


class PoolBlock:
    """A live block of a BuddyPool (implements the MemoryBlock port)."""

    __slots__ = ("_nbytes", "_offset", "_pool", "_ptr", "_size")

    def __init__(self, pool: BuddyPool, offset: int, nbytes: int, size: int) -> None:
        self._pool = pool
        self._offset = offset
        self._ptr = pool.base + offset
        self._nbytes = nbytes
        self._size = size

    @property
    def device_ptr(self) -> int:
        return self._ptr

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def nbytes(self) -> int:
        return self._nbytes

    @property
    def size(self) -> int:
        return self._size

    def release(self) -> None:
        self._pool.release(self)

    def __enter__(self) -> PoolBlock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"PoolBlock(ptr={self._ptr:#x}, nbytes={self._nbytes}, size={self._size})"


class BuddyPool:
    """Thread-safe pool logic; subclasses implement `_copy_in`, `_copy_out`, `_free_arena`."""

    def __init__(self, base: int, arena_bytes: int, min_block: int, alignment: int) -> None:
        if base % alignment:
            raise PoolError(f"arena base {base:#x} is not aligned to {alignment}")
        try:
            self._buddy = BuddyAllocator(arena_bytes, min_block, alignment)
        except InvalidRequest as e:
            raise PoolError(str(e)) from e
        self.base = base
        self._lock = threading.Lock()
        self._live: dict[int, PoolBlock] = {}
        self._closed = False

    @property
    def arena_bytes(self) -> int:
        return self._buddy.arena_bytes

    @property
    def alignment(self) -> int:
        return self._buddy.alignment

    @property
    def closed(self) -> bool:
        return self._closed

    def allocate(self, nbytes: int) -> PoolBlock:
        if nbytes <= 0:
            raise PoolError(f"nbytes must be positive, got {nbytes}")
        with self._lock:
            if self._closed:
                raise PoolClosed("pool is closed")
            try:
                offset = self._buddy.allocate(nbytes)
            except AllocationFailed as e:
                raise PoolExhausted(nbytes, e.largest_free) from None
            block = PoolBlock(self, offset, nbytes, self._buddy.size_of(offset))
            self._live[offset] = block
            return block

    def release(self, block: MemoryBlock) -> None:
        with self._lock:
            if self._closed:
                raise PoolClosed("pool is closed")
            offset = self._check(block)
            del self._live[offset]
            self._buddy.free(offset)

    def _check(self, block: MemoryBlock) -> int:
        if not isinstance(block, PoolBlock) or self._live.get(block.offset) is not block:
            raise InvalidBlock(f"{block!r} is not live in this pool")
        return block.offset

    def _range(self, block: MemoryBlock, nbytes: int, offset: int) -> int:
        self._check(block)
        if offset < 0 or nbytes < 0 or offset + nbytes > block.size:
            raise InvalidBlock(f"range {offset}+{nbytes} lies outside {block!r}")
        return block.device_ptr + offset

    def write(self, block: MemoryBlock, data: bytes, offset: int = 0) -> None:
        with self._lock:
            if self._closed:
                raise PoolClosed("pool is closed")
            addr = self._range(block, len(data), offset)
            if data:
                self._copy_in(addr, data)

    def read(self, block: MemoryBlock, nbytes: int, offset: int = 0) -> bytes:
        with self._lock:
            if self._closed:
                raise PoolClosed("pool is closed")
            addr = self._range(block, nbytes, offset)
            return self._copy_out(addr, nbytes) if nbytes else b""

    def stats(self) -> BuddyStats:
        with self._lock:
            return self._buddy.stats()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._live.clear()
            self._free_arena()

    def __enter__(self) -> BuddyPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- backend hooks ------------------------------------------------------------------------

    def _copy_in(self, addr: int, data: bytes) -> None:
        raise NotImplementedError

    def _copy_out(self, addr: int, nbytes: int) -> bytes:
        raise NotImplementedError

    def _free_arena(self) -> None:
        raise NotImplementedError
