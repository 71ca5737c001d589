"""Checks on a real NVIDIA GPU (`make gpu-check`); never part of `make test` or CI.

Every test here skips where NVML finds no GPU, whatever GPU_PLATFORM_REQUIRE_SYSTEM_TESTS says:
CI machines have none. What each test saw (names, counts, driver answers) is collected in
`seen` and written as JSON to GPU_PLATFORM_GPU_REPORT when that is set, so a run on a lent
machine leaves a record to quote. Nothing here changes the GPU's settings: MIG mode is read,
never set, and no GPU is reset.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def nvidia() -> Iterator[Any]:
    """The pynvml module, initialised, on a host with at least one NVIDIA GPU."""
    try:
        import pynvml
    except ImportError:
        pytest.skip("pynvml is not installed (pip install '.[nvidia]')")
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        pytest.skip(f"no NVIDIA driver here: {exc}")
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            pytest.skip("NVML finds no GPU")
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


@pytest.fixture(scope="session")
def torch_python(nvidia: Any) -> str:
    """An interpreter that has PyTorch with CUDA (this one: jobs run it)."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("PyTorch is not installed in this interpreter")
    return os.environ.get("GPU_PLATFORM_TORCH_PYTHON") or __import__("sys").executable


@pytest.fixture(scope="session")
def seen() -> Iterator[dict[str, Any]]:
    record: dict[str, Any] = {}
    yield record
    out = os.environ.get("GPU_PLATFORM_GPU_REPORT")
    if out:
        Path(out).write_text(json.dumps(record, indent=1, sort_keys=True, default=str) + "\n")


def smi(*args: str) -> str:
    return subprocess.run(
        ["nvidia-smi", *args], capture_output=True, text=True, check=True, timeout=60
    ).stdout


def smi_rows(*fields: str) -> list[list[str]]:
    out = smi(f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits")
    return [[cell.strip() for cell in line.split(",")] for line in out.strip().splitlines()]


@pytest.fixture(scope="session")
def gpu_server(torch_python: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """`gpu-platform serve` on this host's real GPUs (inventory=nvml: no simulated fallback),
    the default isolation (`auto`, whose choice is logged), jobs as root so they can run this
    interpreter, and this interpreter's folder first on PATH (engines are found there)."""
    import signal

    from tests.integration.conftest import Server

    root = tmp_path_factory.mktemp("gpu-server")
    bin_dir = os.path.dirname(torch_python)
    env = {
        "GPU_PLATFORM_INVENTORY": "nvml",
        "GPU_PLATFORM_AUTH": "off",
        "GPU_PLATFORM_RATE_LIMIT_PER_SECOND": "0",
        "GPU_PLATFORM_JOB_USER": "root",
        "GPU_PLATFORM_JOB_PID_NAMESPACE": "false",
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    }
    server = Server(root / "data", env).start(timeout=120)
    try:
        yield server
    finally:
        try:
            server.stop(signal.SIGTERM)
        except subprocess.TimeoutExpired:
            server.stop(signal.SIGKILL)
