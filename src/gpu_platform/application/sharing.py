"""Shares of one GPU as the control plane launches and reports them.

`launch_fields(spec, gpu)` is what an attempt's `LaunchSpec` carries for its request: its CPU
milli-cores and, for a share of one GPU, the mode it runs under and (MPS) its `MpsShare`: the
active-thread percentage is the share's compute (`gpu_milli / 10`, at least 1) and the pinned
memory is what admission counted (`sharing.pinned_bytes`). `quota_gpu_memory` is what a job
counts against a GPU-memory quota. `placement_milli` is the share placement asks for: its
compute, or more when its pinned memory is a larger fraction of the smallest GPU that can hold
it, so that the view's free milli-GPU (compute and memory left, whichever is less) never lets
one cycle pin more memory than a GPU has.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpu_platform.domain.allocation.mps import MIB, MpsShare
from gpu_platform.domain.model.gpu import Gpu
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.sharing import MILLI, effective_sharing, pinned_bytes

__all__ = ["launch_fields", "placement_milli", "quota_gpu_memory"]


def launch_fields(job_id: str, spec: JobSpec, gpu: Gpu | None) -> dict[str, Any]:
    """`LaunchSpec` keyword arguments for `spec`'s sharing fields on `gpu` (its first GPU)."""
    out: dict[str, Any] = {"cpu_milli": spec.cpu_milli}
    if gpu is None or spec.gpu_milli >= MILLI:
        return out
    mode = effective_sharing(spec.sharing, str(gpu.vendor))
    out["sharing"] = mode
    if mode == "mps":
        pinned = pinned_bytes(spec.gpu_milli, spec.gpu_memory_bytes, gpu.memory_bytes)
        percent = max(1, spec.gpu_milli * 100 // MILLI)
        out["mps"] = MpsShare(job_id, percent, max(pinned, MIB))
    return out


def quota_gpu_memory(spec: JobSpec) -> int:
    """GPU memory (bytes) a job counts against its tenant's quota: what it asked per GPU,
    times its GPUs (0 when it asked none)."""
    return (spec.gpu_memory_bytes or 0) * spec.gpus * spec.tasks


def placement_milli(spec: JobSpec, capacities: Sequence[int]) -> int:
    """Milli-GPU to place a share of `spec` with, given the GPU memory sizes of the cluster
    (`capacities`, any order): at least its memory's fraction of the smallest GPU that has
    that much memory (every GPU it may land on has at least that much)."""
    memory = spec.gpu_memory_bytes
    if memory is None or spec.gpu_milli >= MILLI:
        return spec.gpu_milli
    fitting = [c for c in capacities if c >= memory]
    if not fitting:
        return spec.gpu_milli
    smallest = min(fitting)
    return min(MILLI, max(spec.gpu_milli, -(-memory * MILLI // smallest)))
