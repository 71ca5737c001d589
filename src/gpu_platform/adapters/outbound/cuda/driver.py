"""A thin ctypes binding of the CUDA driver API calls the memory pool needs.

`libcuda.so.1` is loaded lazily on first use through an injectable `loader` (tests pass a
fake library object with the same function names and C calling shapes: output parameters
are ctypes pointers, device pointers and sizes plain integers). Every non-zero CUresult
becomes a DriverError naming the call and the CUDA error (via `cuGetErrorName`, or the table
below when that call is itself unavailable); CUDA_ERROR_OUT_OF_MEMORY becomes
DeviceOutOfMemory. A library that cannot be loaded raises DriverLibraryAbsent.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from gpu_platform.ports.outbound.memory_pool import (
    DeviceOutOfMemory,
    DriverError,
    DriverLibraryAbsent,
)

__all__ = ["CUDA_ERRORS", "CudaDriver", "load_libcuda"]

LIBCUDA = "libcuda.so.1"

#: CUresult values (cuda.h) used for messages when cuGetErrorName is unavailable.
CUDA_ERRORS: dict[int, str] = {
    1: "CUDA_ERROR_INVALID_VALUE",
    2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    4: "CUDA_ERROR_DEINITIALIZED",
    35: "CUDA_ERROR_INSUFFICIENT_DRIVER",
    46: "CUDA_ERROR_DEVICE_UNAVAILABLE",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    201: "CUDA_ERROR_INVALID_CONTEXT",
    304: "CUDA_ERROR_OPERATING_SYSTEM",
    700: "CUDA_ERROR_ILLEGAL_ADDRESS",
    999: "CUDA_ERROR_UNKNOWN",
}
CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2

_u64 = ctypes.c_uint64
_size = ctypes.c_size_t
_int = ctypes.c_int
_vp = ctypes.c_void_p

#: argtypes for a real CDLL (a fake library object is called the same way without them).
_SIGNATURES: dict[str, list[Any]] = {
    "cuInit": [ctypes.c_uint],
    "cuDriverGetVersion": [ctypes.POINTER(_int)],
    "cuDeviceGet": [ctypes.POINTER(_int), _int],
    "cuDeviceGetCount": [ctypes.POINTER(_int)],
    "cuDeviceGetName": [ctypes.c_char_p, _int, _int],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(_vp), _int],
    "cuDevicePrimaryCtxRelease_v2": [_int],
    "cuCtxSetCurrent": [_vp],
    "cuMemAlloc_v2": [ctypes.POINTER(_u64), _size],
    "cuMemFree_v2": [_u64],
    "cuMemGetInfo_v2": [ctypes.POINTER(_size), ctypes.POINTER(_size)],
    "cuMemcpyHtoD_v2": [_u64, _vp, _size],
    "cuMemcpyDtoH_v2": [_vp, _u64, _size],
    "cuGetErrorName": [_int, ctypes.POINTER(ctypes.c_char_p)],
}


def load_libcuda() -> Any:
    """Load the real driver library (raises OSError when absent)."""
    lib = ctypes.CDLL(LIBCUDA)
    for name, argtypes in _SIGNATURES.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes = argtypes
            fn.restype = _int
    return lib


class CudaDriver:
    """The CUDA driver API calls of the pool, with errors mapped. Not thread-safe on its own:
    the pool serialises calls."""

    def __init__(self, loader: Callable[[], Any] = load_libcuda) -> None:
        self._loader = loader
        self._lib: Any = None
        self._initialised = False

    @property
    def lib(self) -> Any:
        if self._lib is None:
            try:
                self._lib = self._loader()
            except OSError as e:
                raise DriverLibraryAbsent(
                    f"CUDA driver library absent: {LIBCUDA} could not be loaded ({e}); "
                    "install the NVIDIA driver or use the host-memory pool"
                ) from e
        return self._lib

    def _call(self, name: str, *args: Any) -> None:
        fn = getattr(self.lib, name, None)
        if fn is None:
            raise DriverError(name, -1, "SYMBOL_NOT_FOUND", f"{LIBCUDA} has no {name}")
        rc = int(fn(*args))
        if rc != CUDA_SUCCESS:
            error = DeviceOutOfMemory if rc == CUDA_ERROR_OUT_OF_MEMORY else DriverError
            raise error(name, rc, self.error_name(rc))

    def error_name(self, code: int) -> str:
        fn = getattr(self.lib, "cuGetErrorName", None)
        if fn is not None:
            out = ctypes.c_char_p()
            if int(fn(code, ctypes.pointer(out))) == CUDA_SUCCESS and out.value:
                return out.value.decode()
        return CUDA_ERRORS.get(code, f"CUDA_ERROR_{code}")

    def init(self) -> None:
        if not self._initialised:
            self._call("cuInit", 0)
            self._initialised = True

    def driver_version(self) -> int:
        out = _int()
        self._call("cuDriverGetVersion", ctypes.pointer(out))
        return out.value

    def device_count(self) -> int:
        out = _int()
        self._call("cuDeviceGetCount", ctypes.pointer(out))
        return out.value

    def device_get(self, ordinal: int) -> int:
        out = _int()
        self._call("cuDeviceGet", ctypes.pointer(out), ordinal)
        return out.value

    def device_name(self, device: int) -> str:
        buf = ctypes.create_string_buffer(256)
        self._call("cuDeviceGetName", buf, 256, device)
        return buf.value.decode(errors="replace")

    def primary_ctx_retain(self, device: int) -> int:
        out = _vp()
        self._call("cuDevicePrimaryCtxRetain", ctypes.pointer(out), device)
        if not out.value:
            raise DriverError("cuDevicePrimaryCtxRetain", -1, "NULL_CONTEXT")
        return out.value

    def primary_ctx_release(self, device: int) -> None:
        self._call("cuDevicePrimaryCtxRelease_v2", device)

    def ctx_set_current(self, ctx: int) -> None:
        self._call("cuCtxSetCurrent", ctx)

    def mem_get_info(self) -> tuple[int, int]:
        free, total = _size(), _size()
        self._call("cuMemGetInfo_v2", ctypes.pointer(free), ctypes.pointer(total))
        return free.value, total.value

    def mem_alloc(self, nbytes: int) -> int:
        out = _u64()
        self._call("cuMemAlloc_v2", ctypes.pointer(out), nbytes)
        return out.value

    def mem_free(self, dptr: int) -> None:
        self._call("cuMemFree_v2", dptr)

    def memcpy_htod(self, dst: int, data: bytes) -> None:
        buf = ctypes.create_string_buffer(data, len(data))
        self._call("cuMemcpyHtoD_v2", dst, ctypes.addressof(buf), len(data))

    def memcpy_dtoh(self, src: int, nbytes: int) -> bytes:
        buf = ctypes.create_string_buffer(nbytes)
        self._call("cuMemcpyDtoH_v2", ctypes.addressof(buf), src, nbytes)
        return buf.raw
