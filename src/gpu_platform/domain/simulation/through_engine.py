"""The FGD protocol's `default` policy: every task goes through the production engine.

The trace's nodes become `Node`s (CPU cores, memory, `gpus` GPUs of the node's model, no
topology: every GPU pair is one rung, so the ladder ties and the blended fragmentation /
best-fit / CPU-stranding value decides) in a `ClusterView` whose typical tasks are the
trace's (FGD's 95 % most popular shapes). A task becomes a `GpuRequest` (whole GPUs, or one
milli-GPU share; CPU milli-cores; memory; accepted GPU models) and is placed with `place()`;
a `GangPlacement` is bound with `view.bind`, an `Unschedulable` is a dropped task. Nothing
here scores: the simulator measures exactly what the control plane binds.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpu_platform.domain.model.gpu import Gpu, Vendor
from gpu_platform.domain.model.node import Node
from gpu_platform.domain.placement.engine import place
from gpu_platform.domain.placement.fragmentation import MILLI, TaskShape, TypicalTasks
from gpu_platform.domain.placement.request import GangPlacement, GpuRequest
from gpu_platform.domain.placement.view import ClusterView

__all__ = ["EnginePlacer", "as_node", "as_request"]

_MIB = 1 << 20


def as_node(name: str, cpu_milli: int, memory_mib: int, gpus: int, model: str) -> Node:
    """A trace node as the engine sees it. Raises ValueError when the CPU is not a whole
    number of cores (the engine counts cores)."""
    if cpu_milli % 1000:
        raise ValueError(f"node {name}: cpu_milli {cpu_milli} is not whole cores")
    return Node(
        name=name,
        gpus=tuple(
            Gpu(f"{name}-gpu{i}", i, name, Vendor.NVIDIA, model or "unknown", 0)
            for i in range(gpus)
        ),
        cpus=cpu_milli // 1000,
        memory_bytes=memory_mib * _MIB,
    )


def as_request(task: TaskShape) -> GpuRequest:
    """A trace task as one engine request (a single task; constraints PREFERRED)."""
    return GpuRequest(
        gpus=task.gpus,
        gpu_milli=task.gpu_milli if task.gpus else MILLI,
        cpu_milli=task.cpu_milli,
        memory_bytes=task.memory_mib * _MIB,
        models=task.models,
    )


class EnginePlacer:
    """Places trace tasks one by one through `place()` and binds them into its view."""

    def __init__(self, nodes: Sequence[Node], typical: TypicalTasks) -> None:
        self.view = ClusterView(nodes, typical)
        self._requests: dict[TaskShape, GpuRequest] = {}

    def __call__(self, task: TaskShape) -> bool:
        """True when `task` was placed and bound; False when the engine found no place."""
        request = self._requests.get(task)
        if request is None:
            request = self._requests[task] = as_request(task)
        result = place(request, self.view)
        if not isinstance(result, GangPlacement):
            return False
        for placed in result.tasks:
            self.view.bind(placed, request.cpu_milli, request.memory_bytes)
        return True
