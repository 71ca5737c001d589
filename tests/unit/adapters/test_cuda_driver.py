from __future__ import annotations

import ctypes.util
from typing import Any

import pytest

from gpu_platform.adapters.outbound.cuda import CudaDriver, CudaMemoryPool, load_libcuda
from gpu_platform.ports.outbound.memory_pool import (
    DeviceOutOfMemory,
    DriverError,
    DriverLibraryAbsent,
)
from gpu_platform.testing.fake_cuda import FakeCudaLibrary

MIB = 1 << 20


def _missing() -> Any:
    raise OSError("libcuda.so.1: cannot open shared object file")


def _pool(lib: FakeCudaLibrary, arena: int = 8 * MIB) -> CudaMemoryPool:
    return CudaMemoryPool(arena, min_block=64 << 10, driver=CudaDriver(lambda: lib))


def test_a_missing_driver_library_is_reported_as_absent_on_first_use_not_at_construction() -> None:
    driver = CudaDriver(_missing)  # nothing loaded yet
    with pytest.raises(DriverLibraryAbsent, match="CUDA driver library absent"):
        driver.init()


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="libcuda is present")
def test_the_default_loader_fails_cleanly_where_no_nvidia_driver_is_installed() -> None:
    with pytest.raises(OSError):
        load_libcuda()
    with pytest.raises(DriverLibraryAbsent):
        CudaMemoryPool(MIB)


def test_the_pool_reserves_one_arena_in_the_primary_context_and_frees_it_on_close() -> None:
    lib = FakeCudaLibrary()
    pool = _pool(lib)
    assert lib.calls[:5] == [
        "cuInit",
        "cuDeviceGet",
        "cuDevicePrimaryCtxRetain",
        "cuCtxSetCurrent",
        "cuMemAlloc_v2",
    ]
    assert lib.live_allocations == 1 and lib.context_refs(0) == 1
    blocks = [pool.allocate(100 << 10) for _ in range(10)]
    assert lib.live_allocations == 1  # sub-allocation never calls the driver
    for b in blocks:
        b.release()
    pool.close()
    assert lib.live_allocations == 0 and lib.context_refs(0) == 0


def test_an_arena_larger_than_the_device_is_device_out_of_memory_and_leaks_no_context() -> None:
    lib = FakeCudaLibrary(devices=[("small", 4 * MIB)])
    with pytest.raises(DeviceOutOfMemory) as info:
        _pool(lib, 8 * MIB)
    assert info.value.name == "CUDA_ERROR_OUT_OF_MEMORY" and info.value.call == "cuMemAlloc_v2"
    assert lib.context_refs(0) == 0


def test_driver_errors_name_the_call_and_the_cuda_error() -> None:
    lib = FakeCudaLibrary()
    lib.fail_next("cuInit", 100)
    with pytest.raises(DriverError, match=r"cuInit failed with CUDA_ERROR_NO_DEVICE \(100\)"):
        _pool(lib)


def test_an_invalid_device_ordinal_is_a_driver_error() -> None:
    lib = FakeCudaLibrary()
    with pytest.raises(DriverError) as info:
        CudaMemoryPool(MIB, device_ordinal=3, driver=CudaDriver(lambda: lib))
    assert info.value.code == 101 and info.value.name == "CUDA_ERROR_INVALID_DEVICE"


def test_error_names_fall_back_to_the_table_when_cu_get_error_name_cannot_name_them() -> None:
    class NoNames(FakeCudaLibrary):
        def cuGetErrorName(self, code: int, out: Any) -> int:
            return 1

    lib = NoNames()
    lib.fail_next("cuInit", 4)
    with pytest.raises(DriverError, match="CUDA_ERROR_DEINITIALIZED"):
        _pool(lib)


def test_a_symbol_missing_from_an_old_driver_is_a_driver_error() -> None:
    class Old(FakeCudaLibrary):
        def __getattribute__(self, name: str) -> Any:
            if name == "cuDevicePrimaryCtxRelease_v2":
                raise AttributeError(name)
            return super().__getattribute__(name)

    driver = CudaDriver(Old)
    driver.init()
    with pytest.raises(DriverError, match="SYMBOL_NOT_FOUND"):
        driver.primary_ctx_release(0)


def test_a_copy_failure_in_the_driver_surfaces_as_a_driver_error() -> None:
    lib = FakeCudaLibrary()
    pool = _pool(lib)
    with pool.allocate(MIB) as block:
        lib.fail_next("cuMemcpyHtoD_v2", 700)
        with pytest.raises(DriverError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
            pool.write(block, b"abc")
    pool.close()


def test_the_driver_reports_version_device_count_and_memory_info() -> None:
    lib = FakeCudaLibrary(devices=[("a", 16 * MIB), ("b", 32 * MIB)])
    driver = CudaDriver(lambda: lib)
    driver.init()
    assert driver.driver_version() == 12040 and driver.device_count() == 2
    dev = driver.device_get(1)
    driver.ctx_set_current(driver.primary_ctx_retain(dev))
    assert driver.device_name(dev) == "b"
    ptr = driver.mem_alloc(MIB)
    assert driver.mem_get_info() == (31 * MIB, 32 * MIB)
    driver.mem_free(ptr)
    with pytest.raises(DriverError, match="INVALID_VALUE"):
        driver.mem_free(ptr)
