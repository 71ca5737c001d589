"""Intel Level Zero Sysman adapter (pyzes, imported lazily)."""

from gpu_platform.adapters.outbound.levelzero.adapter import LevelZeroGpuDiscovery

__all__ = ["LevelZeroGpuDiscovery"]
