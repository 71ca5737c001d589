"""CudaMemoryPool: one arena of device memory (cuMemAlloc) sub-allocated with the buddy
allocator.

Construction: cuInit, cuDeviceGet(ordinal), cuDevicePrimaryCtxRetain, cuCtxSetCurrent,
cuMemAlloc_v2(arena). Allocation and release are pure bookkeeping (no driver call, so they are
as fast as the buddy allocator plus a lock); `write`/`read` make the primary context current
and copy with cuMemcpyHtoD/DtoH. `close()` frees the arena and releases the primary context.
cuMemAlloc returns memory aligned to at least 256 bytes, NVIDIA's allocation alignment.
"""

from __future__ import annotations

from gpu_platform.adapters.outbound.cuda.driver import CudaDriver
from gpu_platform.adapters.outbound.suballoc import BuddyPool
from gpu_platform.domain.allocation.buddy import ALIGNMENT_BYTES

__all__ = ["CudaMemoryPool"]

_TWO_MIB = 2 << 20


class CudaMemoryPool(BuddyPool):
    """`arena_bytes` of device memory on CUDA device `device_ordinal`."""

    def __init__(
        self,
        arena_bytes: int,
        device_ordinal: int = 0,
        min_block: int = _TWO_MIB,
        driver: CudaDriver | None = None,
    ) -> None:
        self._driver = driver if driver is not None else CudaDriver()
        d = self._driver
        d.init()
        self._device = d.device_get(device_ordinal)
        self._ctx = d.primary_ctx_retain(self._device)
        try:
            d.ctx_set_current(self._ctx)
            self._dptr = d.mem_alloc(arena_bytes)
        except Exception:
            d.primary_ctx_release(self._device)
            raise
        try:
            super().__init__(self._dptr, arena_bytes, min_block, ALIGNMENT_BYTES["nvidia"])
        except Exception:
            d.mem_free(self._dptr)
            d.primary_ctx_release(self._device)
            raise
        self.device_name = d.device_name(self._device)

    def _copy_in(self, addr: int, data: bytes) -> None:
        self._driver.ctx_set_current(self._ctx)
        self._driver.memcpy_htod(addr, data)

    def _copy_out(self, addr: int, nbytes: int) -> bytes:
        self._driver.ctx_set_current(self._ctx)
        return self._driver.memcpy_dtoh(addr, nbytes)

    def _free_arena(self) -> None:
        self._driver.ctx_set_current(self._ctx)
        try:
            self._driver.mem_free(self._dptr)
        finally:
            self._driver.primary_ctx_release(self._device)
