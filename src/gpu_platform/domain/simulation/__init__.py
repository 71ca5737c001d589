"""Trace-driven placement simulation: the FGD protocol and its policies (pure)."""

from gpu_platform.domain.simulation.fgd import SimNode, SimResult, inflate, simulate
from gpu_platform.domain.simulation.policies import POLICIES

__all__ = ["POLICIES", "SimNode", "SimResult", "inflate", "simulate"]
