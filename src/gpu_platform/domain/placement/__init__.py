"""Placement: pure functions from a request and a cluster snapshot to a Placement or a reason.

`place(GpuRequest, ClusterView)` is the engine (docs/placement.md); `first_fit` is the
foundation's placeholder, kept for callers that still use it (`place_whole` is its drop-in).
"""

from gpu_platform.domain.placement.engine import place, place_whole
from gpu_platform.domain.placement.first_fit import (
    NodeView,
    Placement,
    PlacementRequest,
    Unschedulable,
    first_fit,
)
from gpu_platform.domain.placement.request import (
    Affinity,
    GangPlacement,
    GpuRequest,
    GpuShare,
    Score,
    TaskPlacement,
)
from gpu_platform.domain.placement.view import ClusterView

__all__ = [
    "Affinity",
    "ClusterView",
    "GangPlacement",
    "GpuRequest",
    "GpuShare",
    "NodeView",
    "Placement",
    "PlacementRequest",
    "Score",
    "TaskPlacement",
    "Unschedulable",
    "first_fit",
    "place",
    "place_whole",
]
