"""A real MPS control daemon on a real GPU, run by MpsDaemonController: two CUDA processes are
its clients at once, each held to its pinned-memory limit and thread percentage (the variables
domain.allocation.mps gives a share), and the daemon goes away on `quit`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpu_platform.adapters.outbound.mps import MpsDaemonController
from gpu_platform.domain.allocation.mps import MpsShare, mps_environment
from gpu_platform.testing.cluster_procs import wait_until

CLIENT = Path(__file__).with_name("cuda_client.py")
GIB = 1 << 30


def test_two_cuda_processes_are_clients_of_one_real_mps_daemon_within_their_limits(
    nvidia: Any, torch_python: str, tmp_path: Path, seen: dict[str, Any]
) -> None:
    exe = shutil.which("nvidia-cuda-mps-control")
    if exe is None:
        pytest.skip("nvidia-cuda-mps-control is not installed")
    uuid = nvidia.nvmlDeviceGetUUID(nvidia.nvmlDeviceGetHandleByIndex(0))
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    mps = MpsDaemonController(tmp_path / "pipe", tmp_path / "log", exe, {0: uuid})
    share = MpsShare("gpu-check", active_thread_percentage=50, pinned_memory_bytes=2 * GIB)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=uuid, **mps.client_environment(0))
    env.update(mps_environment(share))
    release = tmp_path / "release"
    mps.start_mps(0)
    clients: list[subprocess.Popen[str]] = []
    try:
        clients = [
            subprocess.Popen(
                [torch_python, str(CLIENT), str(3 * GIB), str(release)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        lines = [_seen_line(c) for c in clients]
        servers = mps.command(0, "get_server_list").split()
        client_pids = mps.command(0, f"get_client_list {servers[0]}").split() if servers else []
        seen["mps"] = {
            "env": {k: v for k, v in env.items() if k.startswith("CUDA_MPS")},
            "clients": lines,
            "server_list": servers,
            "client_list": client_pids,
            "default_active_thread_percentage": mps.default_active_thread_percentage(0),
        }
        assert len(servers) == 1, servers  # one MPS server process serves both
        assert sorted(client_pids) == sorted(str(c.pid) for c in clients)
        for line in lines:
            assert line["big_allocation"] == "refused"  # 3 GiB over a 2 GiB pinned limit
            assert line["checksum_finite"]
    finally:
        release.touch()
        for c in clients:
            try:
                c.wait(timeout=60)
            except subprocess.TimeoutExpired:
                c.kill()
                c.wait()
        mps.stop_mps(0)
    assert wait_until(lambda: not mps.mps_running(0), timeout=30)


def _seen_line(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("SEEN "):
            return dict(json.loads(line.removeprefix("SEEN ")))
    proc.wait(timeout=30)
    raise AssertionError(
        f"client exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}"
    )
