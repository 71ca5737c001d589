"""Why a request cannot be placed: one reason per failed constraint, with how many nodes it
ruled out (gpu model, gpu vendor, gpu memory, free gpus, numa required, nvlink required, cpu,
memory; a gang whose tasks each fit a node but not together: gang).

`place` (`placement.engine`) calls it when no placement is found. Nodes alike answer alike:
the GPU side is cached per (request, hardware class, free shares) in the view's `gpu_cache`.
Split from `engine` for size.
"""

from __future__ import annotations

from gpu_platform.domain.placement.first_fit import Unschedulable
from gpu_platform.domain.placement.node_choice import HardwareClass, choose_gpus, count_fitting
from gpu_platform.domain.placement.request import Affinity, GpuRequest
from gpu_platform.domain.placement.view import ClusterView

__all__ = ["why_unschedulable"]


def _gpu_reason(
    request: GpuRequest, probe: GpuRequest, hw: HardwareClass, free: tuple[int, ...]
) -> str | None:
    """The first GPU-side constraint a node of class `hw` with shares `free` fails."""
    gpus = hw.gpus
    if request.models and not any(g.model in request.models for g in gpus):
        return "gpu model"
    if request.vendors and not any(str(g.vendor) in request.vendors for g in gpus):
        return "gpu vendor"
    if not any(g.memory_bytes >= request.gpu_memory_bytes for g in gpus):
        return "gpu memory"
    if count_fitting(hw, free, probe) < request.gpus:  # = choose_gpus(probe) is None
        return "free gpus"
    if (
        request.numa is Affinity.REQUIRED
        and choose_gpus(
            hw, free, GpuRequest(request.gpus, request.gpu_milli, numa=Affinity.REQUIRED)
        )
        is None
    ):
        return "numa required"
    if (
        request.nvlink is Affinity.REQUIRED
        and choose_gpus(
            hw, free, GpuRequest(request.gpus, request.gpu_milli, nvlink=Affinity.REQUIRED)
        )
        is None
    ):
        return "nvlink required"
    return None


def why_unschedulable(request: GpuRequest, view: ClusterView) -> Unschedulable:
    """One reason per failed constraint, with how many nodes it ruled out."""
    counts: dict[str, int] = {}

    def miss(what: str) -> None:
        counts[what] = counts.get(what, 0) + 1

    probe = GpuRequest(
        gpus=request.gpus,
        gpu_milli=request.gpu_milli,
        models=request.models,
        vendors=request.vendors,
    )
    # nodes alike answer alike: the GPU side is cached per (request, class, shares)
    cache = view.gpu_cache
    why = ("why", request.gpus, request.gpu_milli, request.gpu_memory_bytes, request.models,
             request.vendors, request.nvlink, request.numa)  # fmt: skip
    for slot in view.slots.values():
        if request.gpus:
            key = (why, slot.hw, tuple(slot.free))
            if key in cache:
                reason = cache[key]
            else:
                reason = cache[key] = _gpu_reason(request, probe, view.classes[slot.hw], key[2])
            if reason is not None:
                miss(reason)
                continue
        if slot.cpu_free < request.cpu_milli:
            miss("cpu")
            continue
        if slot.memory_free < request.memory_bytes:
            miss("memory")
            continue
    if request.tasks > 1 and not counts:
        counts["gang"] = len(view.slots)
    shape = (
        f"{request.tasks} x {request.gpus} GPU"
        if not request.fractional
        else f"{request.tasks} x {request.gpu_milli} milli-GPU"
    )
    detail = "; ".join(f"{what}: {n} nodes" for what, n in sorted(counts.items()))
    if request.tasks > 1 and "gang" in counts:
        detail = f"each node fits a task but the {request.tasks} tasks do not fit together" + (
            " within one rack" if request.same_rack is Affinity.REQUIRED else ""
        )
    if not view.slots:
        detail = "no nodes"
    return Unschedulable(f"no placement for {shape}: {detail}", tuple(sorted(counts.items())))
