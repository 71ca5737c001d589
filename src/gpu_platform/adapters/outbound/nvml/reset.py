"""NvidiaSmiGpuReset: resets a GPU with `nvidia-smi --gpu-reset -i INDEX` (needs root and an
idle GPU; NVML has no reset call in nvidia-ml-py). Only GPUs of this node can be reset."""

from __future__ import annotations

import shutil
import subprocess

from gpu_platform.ports.outbound.gpu_reset import GpuResetError

__all__ = ["NvidiaSmiGpuReset"]


class NvidiaSmiGpuReset:
    """Implements GpuReset for the local node `node` with the `nvidia-smi` executable."""

    def __init__(self, node: str, *, binary: str = "nvidia-smi", timeout_s: float = 120.0) -> None:
        self._node = node
        self._binary = binary
        self._timeout = timeout_s

    def reset(self, node: str, gpu_index: int) -> None:
        if node != self._node:
            raise GpuResetError(f"gpu {node}:{gpu_index} is not on this node ({self._node})")
        exe = shutil.which(self._binary)
        if exe is None:
            raise GpuResetError(f"{self._binary} not found")
        try:
            done = subprocess.run(
                [exe, "--gpu-reset", "-i", str(gpu_index)],
                capture_output=True,
                text=True,
                timeout=self._timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise GpuResetError(f"{self._binary} did not finish in {self._timeout:g}s") from None
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()
            last = detail[-1] if detail else ""
            raise GpuResetError(f"{self._binary} exited {done.returncode}: {last}".rstrip(": "))
