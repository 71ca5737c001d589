"""GPU sharing over a real server, the real CLI and real job processes (the default simulated
8-GPU node, the fake `nvidia-cuda-mps-control` of gpu_platform.testing): four quarter-GPU jobs
land on one GPU, each sees the MPS environment of that GPU's daemon, which stops after the last
one ends; an XID on a shared GPU re-queues all four sharers; a CPU request shows in the job's
cgroup; a tenant capped at 2 CPUs cannot start a 4-CPU job; bad requests name their field."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpu_platform.testing.fake_mps_control import write_fake_mps_control
from tests.integration.conftest import Server, wait_for

# prints its MPS environment, then waits for the file named by argv[1]
SHOW_ENV = (
    "import json, os, sys, time; keys = [k for k in os.environ if k.startswith('CUDA_')];"
    " print('ENV', json.dumps({k: os.environ[k] for k in keys}), flush=True);"
    " [time.sleep(0.05) for _ in iter(lambda: os.path.exists(sys.argv[1]), True)]"
)
# prints the CPU quota of its own cgroup (v1 cpu.cfs_quota_us, v2 cpu.max), or "none"
SHOW_CPU_QUOTA = r"""
import os
quota = "none"
for line in open("/proc/self/cgroup"):
    _, controllers, path = line.strip().split(":", 2)
    if "cpu" in controllers.split(","):
        file = f"/sys/fs/cgroup/cpu{path}/cpu.cfs_quota_us"
    elif controllers == "":
        file = f"/sys/fs/cgroup{path}/cpu.max"
    else:
        continue
    if os.path.exists(file) and quota == "none":
        quota = open(file).read().strip()
print("QUOTA", quota, flush=True)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("sharing")
    exe = write_fake_mps_control(root)
    srv = Server(root / "data", {"GPU_PLATFORM_MPS_CONTROL": str(exe)}).start()
    yield srv
    try:
        srv.stop(signal.SIGTERM)
    except subprocess.TimeoutExpired:
        srv.stop(signal.SIGKILL)
    for pidfile in (root / "data" / "mps" / "pipe").glob("gpu*/nvidia-cuda-mps-control.pid"):
        os.kill(int(pidfile.read_text()), signal.SIGKILL)  # a daemon left behind: a bug
        raise AssertionError(f"MPS daemon left running: {pidfile}")


def pid_file(server: Server, gpu: int) -> Path:
    return server.data_dir / "mps" / "pipe" / f"gpu{gpu}" / "nvidia-cuda-mps-control.pid"


def submit(server: Server, *args: str) -> str:
    r = server.cli("submit", "-q", *args)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def post(server: Server, argv: list[str], **body: object) -> str:
    """Submit over REST (the CLI's own start-up costs a second a call on a busy machine)."""
    r = httpx.post(f"{server.url}/v1/jobs", json={"command": argv, **body}, timeout=10)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def logs(server: Server, job_id: str) -> str:
    return httpx.get(f"{server.url}/v1/jobs/{job_id}/logs", timeout=10).text


def running(server: Server, job_id: str, attempt: int = 1) -> dict[str, Any]:
    return server.wait_job(job_id, lambda j: j["state"] == "RUNNING" and j["attempt"] == attempt)


def test_four_quarter_gpu_jobs_share_one_gpus_mps_daemon_until_the_last_ends(
    server: Server, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    argv = [sys.executable, "-c", SHOW_ENV, str(release)]
    jobs = [submit(server, "--gpus", "0.25", "--gpu-memory", "10G", "--", *argv)]  # the CLI
    jobs += [post(server, argv, gpu_milli=250, gpu_memory_bytes=10 << 30) for _ in range(3)]
    slots = {(j["allocation"]["node"], *j["allocation"]["gpu_indices"]) for j in map(
        lambda i: running(server, i), jobs)}  # fmt: skip
    assert len(slots) == 1, slots  # all four on one GPU
    ((_, gpu),) = slots
    assert wait_for(lambda: all("ENV" in logs(server, j) for j in jobs))
    pipe = str(pid_file(server, gpu).parent)
    for job_id in jobs:
        line = next(x for x in logs(server, job_id).splitlines() if x.startswith("ENV"))
        env = json.loads(line.removeprefix("ENV "))
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == pipe
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10240MB"
        assert env["CUDA_VISIBLE_DEVICES"].startswith("GPU-")  # its GPU by UUID, not index
    daemon = int(pid_file(server, gpu).read_text())
    os.kill(daemon, 0)  # the daemon of that GPU runs
    rows = server.get("/v1/gpus")
    (shared,) = [g for g in rows if g["shares"]]
    assert sorted(s["job_id"] for s in shared["shares"]) == sorted(jobs)
    assert sum(s["pinned_memory_bytes"] for s in shared["shares"]) == 40 << 30
    assert "1 shared by 4 jobs" in server.cli("status").stdout
    release.touch()
    for job_id in jobs:
        server.wait_job(job_id, lambda j: j["state"] == "COMPLETED")
    assert wait_for(lambda: not pid_file(server, gpu).exists())  # stopped after the last


def test_an_xid_on_a_shared_gpu_requeues_all_four_sharers(server: Server, tmp_path: Path) -> None:
    release = tmp_path / "release"
    argv = [sys.executable, "-c", SHOW_ENV, str(release)]
    jobs = [post(server, argv, gpu_milli=250) for _ in range(4)]
    first = [running(server, j) for j in jobs]
    gpus = {j["allocation"]["gpu_indices"][0] for j in first}
    assert len(gpus) == 1
    (gpu,) = gpus
    r = server.cli("debug", "inject", f"xid 79 on gpu {gpu}", "--actor", "sharing-test")
    assert r.returncode == 0, r.stderr
    for job_id in jobs:
        again = running(server, job_id, attempt=2)
        assert again["faults"] == 1 and again["allocation"]["gpu_indices"] != [gpu]
    assert wait_for(lambda: not pid_file(server, gpu).exists())
    release.touch()
    for job_id in jobs:
        server.wait_job(job_id, lambda j: j["state"] == "COMPLETED")


def test_a_cpu_request_is_the_cpu_quota_of_the_jobs_cgroup(server: Server) -> None:
    job_id = submit(server, "--cpus", "1.5", "--", sys.executable, "-c", SHOW_CPU_QUOTA)
    server.wait_job(job_id, lambda j: j["state"] == "COMPLETED")
    (line,) = [x for x in logs(server, job_id).splitlines() if x.startswith("QUOTA")]
    if line == "QUOTA none":
        pytest.skip("no cpu cgroup controller confines jobs on this host")
    assert line in ("QUOTA 150000", "QUOTA 150000 100000")  # 1.5 CPUs per 100 ms period


def test_a_tenant_capped_at_two_cpus_cannot_start_a_four_cpu_job(server: Server) -> None:
    r = httpx.put(f"{server.url}/v1/quotas/capped", json={"gpus": 8, "cpu_milli": 2000})
    assert r.status_code == 200, r.text
    job_id = post(server, ["true"], tenant="capped", cpu_milli=4000)
    waiting = server.wait_job(job_id, lambda j: (j.get("pending") or {}).get("code") == "quota")
    assert waiting["state"] == "QUEUED"
    assert "CPU quota" in waiting["pending"]["message"] and "4000" in waiting["pending"]["message"]
    assert server.cli("jobs", "cancel", job_id).returncode == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"gpu_milli": 0}, "gpu_milli"),
        ({"gpus": 2, "gpu_milli": 500}, "gpu_milli"),
        ({"gpus": 1, "vendor": "3dfx"}, "vendor"),
        ({"gpus": 1, "gpu_milli": 500, "gpu_memory_bytes": 1 << 50}, "gpu_memory_bytes"),
        ({"cpu_milli": -1}, "cpu_milli"),
    ],
)
def test_bad_sharing_requests_are_refused_naming_the_field(
    server: Server, body: dict[str, Any], field: str
) -> None:
    r = httpx.post(f"{server.url}/v1/jobs", json={"command": ["true"], **body}, timeout=10)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field


def test_the_cli_refuses_a_fraction_above_one_in_one_line(server: Server) -> None:
    r = server.cli("submit", "--gpus", "1.5", "--", "true")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "more than one GPU with a remainder" in r.stderr
