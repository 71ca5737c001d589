"""GpuReset: resets a GPU (the `reset` half of GPU control, separate from MIG/MPS setup)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["GpuReset", "GpuResetError"]


class GpuResetError(Exception):
    """The reset failed, or the GPU did not pass its health check afterwards."""


@runtime_checkable
class GpuReset(Protocol):
    """`reset(node, gpu_index)` resets one idle GPU (no process may use it) and returns once
    it answers again; it raises GpuResetError otherwise. It may take seconds: callers run it
    off their locks. Thread-safe across GPUs; callers never reset one GPU twice at once."""

    def reset(self, node: str, gpu_index: int) -> None: ...
