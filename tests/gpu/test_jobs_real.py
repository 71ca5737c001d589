"""Jobs on a real GPU through a real server (inventory=nvml), the real CLI and REST: a whole-GPU
job runs CUDA on the GPU it was given, a job that asked for no GPU sees none, and two half-GPU
jobs are clients of the node's real MPS daemon, held to their pinned memory, the daemon gone
after the last."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpu_platform.testing.cluster_procs import wait_until

CLIENT = Path(__file__).with_name("cuda_client.py")
NO_GPU = (
    "import json, os, torch; print('SEEN', json.dumps({'devices': torch.cuda.device_count(),"
    " 'env': {k: v for k, v in os.environ.items() if k.startswith(('CUDA_', 'NVIDIA_'))}}))"
)
GIB = 1 << 30


def submit(server: Any, *args: str) -> str:
    r = server.cli("submit", "-q", *args)
    assert r.returncode == 0, r.stderr
    return str(r.stdout.strip())


def seen_in_logs(server: Any, job_id: str) -> dict[str, Any]:
    text = httpx.get(f"{server.url}/v1/jobs/{job_id}/logs", timeout=10).text
    line = next((x for x in text.splitlines() if x.startswith("SEEN ")), None)
    assert line is not None, text[-4000:]
    return dict(json.loads(line.removeprefix("SEEN ")))


def finished(server: Any, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = {}

    def done() -> bool:
        nonlocal job
        job = server.get(f"/v1/jobs/{job_id}")
        return job["state"] in ("COMPLETED", "FAILED", "CANCELLED")

    assert wait_until(done, timeout=180), job
    return job


def isolation_chosen(server: Any) -> list[str]:
    return [line[:300] for line in server.log.read_text().splitlines() if "isolation" in line][:3]


def test_the_server_lists_the_real_gpu_from_nvml(
    gpu_server: Any, nvidia: Any, seen: dict[str, Any]
) -> None:
    status = gpu_server.get("/v1/status")
    gpus = gpu_server.get("/v1/gpus")
    seen["server"] = {"status": status, "gpus": gpus, "isolation": isolation_chosen(gpu_server)}
    assert status["inventory_source"].split("+")[0] == "nvml" and not status["simulated"], status
    assert len(gpus) == nvidia.nvmlDeviceGetCount()


def test_a_whole_gpu_job_runs_cuda_on_the_gpu_it_was_given(
    gpu_server: Any, torch_python: str, seen: dict[str, Any]
) -> None:
    job_id = submit(gpu_server, "--gpus", "1", "--", torch_python, str(CLIENT), str(GIB))
    job = finished(gpu_server, job_id)
    inside = seen_in_logs(gpu_server, job_id)
    seen["whole_gpu_job"] = {"job": {k: job[k] for k in ("state", "exit_code", "allocation")},
                             "inside": inside}  # fmt: skip
    assert job["state"] == "COMPLETED", job
    assert inside["devices"] == 1 and inside["big_allocation"] == "allocated"
    assert inside["checksum_finite"]
    assert inside["env"]["CUDA_VISIBLE_DEVICES"] in (
        *job["allocation"]["gpu_uuids"],
        *map(str, job["allocation"]["gpu_indices"]),
    )


def test_a_job_that_asked_for_no_gpu_sees_none(
    gpu_server: Any, torch_python: str, seen: dict[str, Any]
) -> None:
    job_id = submit(gpu_server, "--gpus", "0", "--", torch_python, "-c", NO_GPU)
    job = finished(gpu_server, job_id)
    inside = seen_in_logs(gpu_server, job_id)
    seen["no_gpu_job"] = {"state": job["state"], "inside": inside}
    assert job["state"] == "COMPLETED", job
    assert inside["devices"] == 0, inside


def test_two_half_gpu_jobs_are_clients_of_the_real_mps_daemon_within_their_memory(
    gpu_server: Any, torch_python: str, tmp_path: Path, seen: dict[str, Any]
) -> None:
    if shutil.which("nvidia-cuda-mps-control") is None:
        pytest.skip("nvidia-cuda-mps-control is not installed")
    release = tmp_path / "release"
    argv = ["--gpus", "0.5", "--gpu-memory", "4G", "--", torch_python, str(CLIENT)]
    jobs = [submit(gpu_server, *argv, str(6 * GIB), str(release)) for _ in range(2)]
    pipe_root = gpu_server.data_dir / "mps" / "pipe"
    try:
        assert wait_until(
            lambda: (
                all(gpu_server.get(f"/v1/jobs/{j}")["state"] == "RUNNING" for j in jobs)
                and all(
                    "SEEN" in httpx.get(f"{gpu_server.url}/v1/jobs/{j}/logs").text for j in jobs
                )
            ),
            timeout=180,
        ), [gpu_server.get(f"/v1/jobs/{j}") for j in jobs]
        daemons = sorted(str(p) for p in pipe_root.glob("gpu*/nvidia-cuda-mps-control.pid"))
        inside = [seen_in_logs(gpu_server, j) for j in jobs]
        shares = [g["shares"] for g in gpu_server.get("/v1/gpus") if g["shares"]]
    finally:
        release.touch()
    ended = [finished(gpu_server, j) for j in jobs]
    seen["half_gpu_jobs"] = {"inside": inside, "daemons": daemons, "shares": shares,
                             "states": [j["state"] for j in ended]}  # fmt: skip
    assert len(daemons) == 1, daemons
    for one in inside:
        assert one["env"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096MB"
        assert one["big_allocation"] == "refused"  # 6 GiB over a 4 GiB pinned limit
        assert one["checksum_finite"]
    assert [j["state"] for j in ended] == ["COMPLETED", "COMPLETED"], ended
    assert wait_until(lambda: not list(pipe_root.glob("gpu*/nvidia-cuda-mps-control.pid")), 60)
