"""Placement: pure functions from a request and a cluster snapshot to a Placement or a reason."""

from gpu_platform.domain.placement.first_fit import (
    NodeView,
    Placement,
    PlacementRequest,
    Unschedulable,
    first_fit,
)

__all__ = ["NodeView", "Placement", "PlacementRequest", "Unschedulable", "first_fit"]
