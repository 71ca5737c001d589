"""NVIDIA NVML adapter (nvidia-ml-py, imported lazily)."""

from gpu_platform.adapters.outbound.nvml.adapter import CLOCK_EVENT_REASONS, NvmlGpuDiscovery

__all__ = ["CLOCK_EVENT_REASONS", "NvmlGpuDiscovery"]
