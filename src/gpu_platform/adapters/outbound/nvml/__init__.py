"""NVIDIA NVML adapter (nvidia-ml-py, imported lazily)."""

from gpu_platform.adapters.outbound.nvml.adapter import CLOCK_EVENT_REASONS, NvmlGpuDiscovery
from gpu_platform.adapters.outbound.nvml.health import NvmlHealthMonitor
from gpu_platform.adapters.outbound.nvml.reset import NvidiaSmiGpuReset

__all__ = ["CLOCK_EVENT_REASONS", "NvidiaSmiGpuReset", "NvmlGpuDiscovery", "NvmlHealthMonitor"]
