"""CUDA MPS control-daemon adapter (nvidia-cuda-mps-control, one daemon per GPU)."""

from gpu_platform.adapters.outbound.mps.control import MpsDaemonController

__all__ = ["MpsDaemonController"]
