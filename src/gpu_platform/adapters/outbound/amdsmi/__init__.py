"""AMD amdsmi adapter (imported lazily, stdout captured)."""

from gpu_platform.adapters.outbound.amdsmi.adapter import AmdSmiGpuDiscovery

__all__ = ["AmdSmiGpuDiscovery"]
