"""CUDA driver API (ctypes, no CuPy/PyTorch): a device-memory pool over one cuMemAlloc arena."""

from gpu_platform.adapters.outbound.cuda.driver import CudaDriver, load_libcuda
from gpu_platform.adapters.outbound.cuda.pool import CudaMemoryPool

__all__ = ["CudaDriver", "CudaMemoryPool", "load_libcuda"]
