"""HostMemoryPool: the DeviceMemoryPool port over real host memory (an anonymous mmap).

Same sub-allocation code path as the CUDA pool, so the contract suite exercises it in CI;
`device_ptr` values are host virtual addresses inside the mapping (page-aligned base).
"""

from __future__ import annotations

import ctypes
import mmap

from gpu_platform.adapters.outbound.suballoc import BuddyPool
from gpu_platform.ports.outbound.memory_pool import PoolError

__all__ = ["HostMemoryPool"]


class HostMemoryPool(BuddyPool):
    """`arena_bytes` of anonymous host memory, sub-allocated in blocks of >= `min_block`."""

    def __init__(self, arena_bytes: int, min_block: int = 4096, alignment: int = 256) -> None:
        if alignment > mmap.PAGESIZE:
            raise PoolError(f"alignment {alignment} exceeds the page size {mmap.PAGESIZE}")
        self._map = mmap.mmap(-1, arena_bytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._anchor: ctypes.Array[ctypes.c_char] | None = (
            ctypes.c_char * arena_bytes
        ).from_buffer(self._map)
        try:
            super().__init__(ctypes.addressof(self._anchor), arena_bytes, min_block, alignment)
        except Exception:
            self._anchor = None
            self._map.close()
            raise

    def _copy_in(self, addr: int, data: bytes) -> None:
        ctypes.memmove(addr, data, len(data))

    def _copy_out(self, addr: int, nbytes: int) -> bytes:
        return ctypes.string_at(addr, nbytes)

    def _free_arena(self) -> None:
        self._anchor = None  # drop the exported buffer before unmapping
        self._map.close()
