"""The DeviceMemoryPool contract against every adapter: the host-memory arena, and the CUDA
ctypes adapter over the fake driver library (the real libcuda runs on GPU machines only)."""

from __future__ import annotations

import ctypes.util

from gpu_platform.adapters.outbound.cuda import CudaDriver, CudaMemoryPool
from gpu_platform.adapters.outbound.hostmem import HostMemoryPool
from gpu_platform.ports.outbound.memory_pool import DeviceMemoryPool
from gpu_platform.testing.contracts.memory_pool import MemoryPoolContract
from gpu_platform.testing.fake_cuda import FakeCudaLibrary


class TestHostMemoryPool(MemoryPoolContract):
    def make_pool(self, arena_bytes: int, min_block: int) -> DeviceMemoryPool:
        return HostMemoryPool(arena_bytes, min_block)


class TestCudaMemoryPoolOnTheFakeDriver(MemoryPoolContract):
    def make_pool(self, arena_bytes: int, min_block: int) -> DeviceMemoryPool:
        lib = FakeCudaLibrary(devices=[("Fake GPU", 64 << 20)])
        return CudaMemoryPool(arena_bytes, min_block=min_block, driver=CudaDriver(lambda: lib))


_HAS_LIBCUDA = ctypes.util.find_library("cuda") is not None


class TestCudaMemoryPoolOnTheRealDriver(MemoryPoolContract):
    """Runs where libcuda and a GPU exist (skips elsewhere, like other system tests)."""

    def make_pool(self, arena_bytes: int, min_block: int) -> DeviceMemoryPool:
        import pytest

        if not _HAS_LIBCUDA:
            pytest.skip("libcuda.so.1 is not installed (no NVIDIA driver on this machine)")
        return CudaMemoryPool(arena_bytes, min_block=min_block)
