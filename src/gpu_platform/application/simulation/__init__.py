"""Use cases over the trace-driven simulator: run the FGD protocol over policies x seeds."""

from gpu_platform.application.simulation.curves import CurveBand, curve_band, published_curves
from gpu_platform.application.simulation.protocol import (
    PolicySummary,
    ProtocolRun,
    published_means,
    run_protocol,
)

__all__ = [
    "CurveBand",
    "PolicySummary",
    "ProtocolRun",
    "curve_band",
    "published_curves",
    "published_means",
    "run_protocol",
]
