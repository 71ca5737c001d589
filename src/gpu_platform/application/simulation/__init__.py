"""Use cases over the trace-driven simulator: run the FGD protocol over policies x seeds."""

from gpu_platform.application.simulation.protocol import (
    PolicySummary,
    ProtocolRun,
    published_means,
    run_protocol,
)

__all__ = ["PolicySummary", "ProtocolRun", "published_means", "run_protocol"]
