"""FakeCudaLibrary: an in-process stand-in for `libcuda.so.1` with the same function names and
calling shapes the CUDA adapter uses (`CudaDriver(loader=lambda: FakeCudaLibrary())`).

It keeps the rules that matter to a caller: cuInit first (else CUDA_ERROR_NOT_INITIALIZED),
a current context for memory calls (else CUDA_ERROR_INVALID_CONTEXT), device memory limited
to `total_bytes` per device (else CUDA_ERROR_OUT_OF_MEMORY), frees and copies only of/inside
live allocations (else CUDA_ERROR_INVALID_VALUE), primary-context reference counts. "Device"
memory is real host memory, so copies really move bytes. `fail_next(name, code)` makes the
next call of `name` return `code`.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FakeCudaLibrary"]

_NAMES: dict[int, bytes] = {
    0: b"CUDA_SUCCESS",
    1: b"CUDA_ERROR_INVALID_VALUE",
    2: b"CUDA_ERROR_OUT_OF_MEMORY",
    3: b"CUDA_ERROR_NOT_INITIALIZED",
    100: b"CUDA_ERROR_NO_DEVICE",
    101: b"CUDA_ERROR_INVALID_DEVICE",
    201: b"CUDA_ERROR_INVALID_CONTEXT",
}
_ALIGN = 512


@dataclass
class _Device:
    name: bytes
    total: int
    used: int = 0
    ctx_refs: int = 0
    ctx: int = 0


@dataclass
class FakeCudaLibrary:
    devices: list[tuple[str, int]] = field(
        default_factory=lambda: [("Fake NVIDIA H100 80GB HBM3", 80 << 30)]
    )

    def __post_init__(self) -> None:
        self._devs = [_Device(n.encode(), t) for n, t in self.devices]
        self._initialised = False
        self._current = 0
        self._allocs: dict[int, tuple[int, int, Any]] = {}  # ptr -> (size, device, buffer)
        self._failures: dict[str, int] = {}
        self.calls: list[str] = []

    # -- test hooks ---------------------------------------------------------------------------

    def fail_next(self, name: str, code: int) -> None:
        self._failures[name] = code

    @property
    def live_allocations(self) -> int:
        return len(self._allocs)

    def context_refs(self, ordinal: int) -> int:
        return self._devs[ordinal].ctx_refs

    # -- driver API ---------------------------------------------------------------------------

    def _enter(self, name: str, needs_ctx: bool = False) -> int:
        self.calls.append(name)
        if name in self._failures:
            return self._failures.pop(name)
        if name not in {"cuInit", "cuGetErrorName"} and not self._initialised:
            return 3
        if needs_ctx and not any(d.ctx == self._current and d.ctx for d in self._devs):
            return 201
        return 0

    def cuInit(self, flags: int) -> int:
        rc = self._enter("cuInit")
        if rc:
            return rc
        if flags != 0:
            return 1
        if not self._devs:
            return 100
        self._initialised = True
        return 0

    def cuGetErrorName(self, code: int, out: Any) -> int:
        if code not in _NAMES:
            return 1
        out[0] = _NAMES[code]
        return 0

    def cuDriverGetVersion(self, out: Any) -> int:
        out[0] = 12040
        return 0

    def cuDeviceGetCount(self, out: Any) -> int:
        rc = self._enter("cuDeviceGetCount")
        if not rc:
            out[0] = len(self._devs)
        return rc

    def cuDeviceGet(self, out: Any, ordinal: int) -> int:
        rc = self._enter("cuDeviceGet")
        if rc:
            return rc
        if not 0 <= ordinal < len(self._devs):
            return 101
        out[0] = ordinal
        return 0

    def cuDeviceGetName(self, buf: Any, length: int, device: int) -> int:
        rc = self._enter("cuDeviceGetName")
        if rc:
            return rc
        name = self._devs[device].name[: length - 1]
        ctypes.memmove(buf, name + b"\0", len(name) + 1)
        return 0

    def cuDevicePrimaryCtxRetain(self, out: Any, device: int) -> int:
        rc = self._enter("cuDevicePrimaryCtxRetain")
        if rc:
            return rc
        if not 0 <= device < len(self._devs):
            return 101
        dev = self._devs[device]
        dev.ctx_refs += 1
        dev.ctx = dev.ctx or 0x1000 * (device + 1)
        out[0] = dev.ctx
        return 0

    def cuDevicePrimaryCtxRelease_v2(self, device: int) -> int:
        rc = self._enter("cuDevicePrimaryCtxRelease_v2")
        if rc:
            return rc
        dev = self._devs[device]
        if dev.ctx_refs == 0:
            return 201
        dev.ctx_refs -= 1
        if dev.ctx_refs == 0:
            if self._current == dev.ctx:
                self._current = 0
            dev.ctx = 0
        return 0

    def cuCtxSetCurrent(self, ctx: int) -> int:
        rc = self._enter("cuCtxSetCurrent")
        if rc:
            return rc
        if ctx and not any(d.ctx == ctx for d in self._devs):
            return 201
        self._current = ctx
        return 0

    def _device_of_current(self) -> _Device:
        return next(d for d in self._devs if d.ctx == self._current)

    def cuMemGetInfo_v2(self, free: Any, total: Any) -> int:
        rc = self._enter("cuMemGetInfo_v2", needs_ctx=True)
        if not rc:
            dev = self._device_of_current()
            free[0], total[0] = dev.total - dev.used, dev.total
        return rc

    def cuMemAlloc_v2(self, out: Any, nbytes: int) -> int:
        rc = self._enter("cuMemAlloc_v2", needs_ctx=True)
        if rc:
            return rc
        if nbytes == 0:
            return 1
        dev = self._device_of_current()
        if dev.used + nbytes > dev.total:
            return 2
        buf = ctypes.create_string_buffer(nbytes + _ALIGN)
        ptr = (ctypes.addressof(buf) + _ALIGN - 1) // _ALIGN * _ALIGN
        self._allocs[ptr] = (nbytes, self._devs.index(dev), buf)
        dev.used += nbytes
        out[0] = ptr
        return 0

    def cuMemFree_v2(self, ptr: int) -> int:
        rc = self._enter("cuMemFree_v2", needs_ctx=True)
        if rc:
            return rc
        entry = self._allocs.pop(ptr, None)
        if entry is None:
            return 1
        self._devs[entry[1]].used -= entry[0]
        return 0

    def _inside(self, ptr: int, n: int) -> bool:
        return any(base <= ptr and ptr + n <= base + s for base, (s, _, _) in self._allocs.items())

    def cuMemcpyHtoD_v2(self, dst: int, src: int, n: int) -> int:
        rc = self._enter("cuMemcpyHtoD_v2", needs_ctx=True)
        if rc:
            return rc
        if not self._inside(dst, n):
            return 1
        ctypes.memmove(dst, src, n)
        return 0

    def cuMemcpyDtoH_v2(self, dst: int, src: int, n: int) -> int:
        rc = self._enter("cuMemcpyDtoH_v2", needs_ctx=True)
        if rc:
            return rc
        if not self._inside(src, n):
            return 1
        ctypes.memmove(dst, src, n)
        return 0
