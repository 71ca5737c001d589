"""NVIDIA NVML adapters (nvidia-ml-py, imported lazily)."""
