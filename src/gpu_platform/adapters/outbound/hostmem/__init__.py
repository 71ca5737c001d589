"""Host-memory arena implementing the DeviceMemoryPool port (CI stand-in for a GPU)."""

from gpu_platform.adapters.outbound.hostmem.pool import HostMemoryPool

__all__ = ["HostMemoryPool"]
