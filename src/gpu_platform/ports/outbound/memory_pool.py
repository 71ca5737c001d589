"""DeviceMemoryPool: one arena of device memory reserved up front and sub-allocated.

Errors (all raised by adapters, never other exception types):

PoolError
├── DriverLibraryAbsent   the vendor driver library cannot be loaded (no GPU stack here)
├── DriverError           a driver call failed; `call`, `code` and `name` say which and how
│   └── DeviceOutOfMemory the driver could not reserve the arena itself
├── PoolExhausted         no free block is large enough (`requested`, `largest_free` in bytes)
├── InvalidBlock          release/copy of a block this pool does not hold live (double free)
└── PoolClosed            the pool was closed
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

from gpu_platform.domain.allocation.buddy import BuddyStats

__all__ = [
    "DeviceMemoryPool",
    "DeviceOutOfMemory",
    "DriverError",
    "DriverLibraryAbsent",
    "InvalidBlock",
    "MemoryBlock",
    "PoolClosed",
    "PoolError",
    "PoolExhausted",
]


class PoolError(Exception):
    """Base of every error a memory pool raises."""


class DriverLibraryAbsent(PoolError):
    """The driver library (e.g. libcuda.so.1) could not be loaded."""


class DriverError(PoolError):
    """Driver call `call` returned error `code` (`name`, e.g. CUDA_ERROR_INVALID_VALUE)."""

    def __init__(self, call: str, code: int, name: str, message: str = "") -> None:
        detail = f": {message}" if message else ""
        super().__init__(f"{call} failed with {name} ({code}){detail}")
        self.call = call
        self.code = code
        self.name = name


class DeviceOutOfMemory(DriverError):
    """The device has not enough free memory for the arena."""


class PoolExhausted(PoolError):
    def __init__(self, requested: int, largest_free: int) -> None:
        super().__init__(
            f"pool cannot serve {requested} bytes: largest free block is {largest_free} bytes"
        )
        self.requested = requested
        self.largest_free = largest_free


class InvalidBlock(PoolError):
    """The block is not live in this pool (already released, or from another pool)."""


class PoolClosed(PoolError):
    """The pool was closed; no block can be allocated, copied or released."""


@runtime_checkable
class MemoryBlock(AbstractContextManager["MemoryBlock"], Protocol):
    """A live sub-allocation. `device_ptr` is an absolute device address aligned to at least
    the pool's alignment; `nbytes` what was asked for; `size` the block reserved (bytes).
    Leaving the `with` block (or `release()`) returns it to the pool; releasing twice raises
    InvalidBlock."""

    @property
    def device_ptr(self) -> int: ...

    @property
    def nbytes(self) -> int: ...

    @property
    def size(self) -> int: ...

    def release(self) -> None: ...


@runtime_checkable
class DeviceMemoryPool(Protocol):
    """A device-memory arena sub-allocated with the buddy allocator.

    `allocate(nbytes)` returns a MemoryBlock or raises PoolExhausted; no two live blocks
    overlap and every block lies inside the arena. `write`/`read` copy host bytes into / out
    of a live block (offset in bytes from the block start; out-of-block ranges raise
    InvalidBlock). `stats()` is exact accounting in bytes. `close()` releases the arena (live
    blocks become invalid) and is idempotent. All methods are thread-safe.
    """

    @property
    def arena_bytes(self) -> int: ...

    @property
    def alignment(self) -> int: ...

    def allocate(self, nbytes: int) -> MemoryBlock: ...

    def write(self, block: MemoryBlock, data: bytes, offset: int = 0) -> None: ...

    def read(self, block: MemoryBlock, nbytes: int, offset: int = 0) -> bytes: ...

    def stats(self) -> BuddyStats: ...

    def close(self) -> None: ...
