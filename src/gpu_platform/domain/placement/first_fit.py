"""Whole-GPU first-fit placement (the foundation slice; issue 4 brings the real engine).

Nodes are tried in the order given; on the first node with enough free GPUs the request takes
GPUs from a single NUMA node when one has enough, otherwise the lowest free indices. Correct by
construction: it only ever returns GPUs listed as free in the snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpu_platform.domain.model.gpu import Gpu

__all__ = ["NodeView", "Placement", "PlacementRequest", "Unschedulable", "first_fit"]


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    """Whole GPUs on one node."""

    gpus: int


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node as placement sees it: its name and the GPUs that are free and schedulable now."""

    name: str
    free: tuple[Gpu, ...]


@dataclass(frozen=True, slots=True)
class Placement:
    node: str
    gpus: tuple[Gpu, ...]

    @property
    def numa_nodes(self) -> tuple[int, ...]:
        return tuple(sorted({g.numa_node for g in self.gpus if g.numa_node >= 0}))


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """Why nothing fits now. `constraints` names each failed constraint with the number of
    nodes it ruled out (the engine fills it; `first_fit` leaves it empty)."""

    reason: str
    constraints: tuple[tuple[str, int], ...] = ()


def first_fit(request: PlacementRequest, nodes: Sequence[NodeView]) -> Placement | Unschedulable:
    """Place `request` on the first node that fits, or say why nothing fits now."""
    if request.gpus == 0:
        if not nodes:
            return Unschedulable("no nodes")
        return Placement(nodes[0].name, ())
    best_free = 0
    for node in nodes:
        if len(node.free) < request.gpus:
            best_free = max(best_free, len(node.free))
            continue
        free = sorted(node.free, key=lambda g: g.index)
        by_numa: dict[int, list[Gpu]] = {}
        for gpu in free:
            by_numa.setdefault(gpu.numa_node, []).append(gpu)
        for group in sorted(by_numa.values(), key=len):
            if len(group) >= request.gpus:
                return Placement(node.name, tuple(group[: request.gpus]))
        return Placement(node.name, tuple(free[: request.gpus]))
    return Unschedulable(
        f"insufficient free GPUs: need {request.gpus} on one node, most free on any node is "
        f"{best_free}"
    )
