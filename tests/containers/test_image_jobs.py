"""`submit --image`: a real `gpu-platform serve` (its in-process agent on a simulated 8-GPU node)
runs jobs in containers on a real Docker daemon, with a bare process's promises."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpu_platform.adapters.outbound.containers import DockerContainerRuntime
from gpu_platform.adapters.outbound.containers.job_runner import JOB_LABEL
from tests.integration.conftest import Server, wait_for


class Node(Server):
    """`serve` with its agent; a loaded machine may take longer than 60 s to bring it up."""

    def start(self, timeout: float = 120.0) -> Node:
        super().start(timeout)
        return self


@pytest.fixture
def runtime(docker_address: str) -> Iterator[DockerContainerRuntime]:
    runtime = DockerContainerRuntime(docker_address)
    yield runtime
    runtime.close()


@pytest.fixture
def server(tmp_path: Path, docker_address: str, base: str) -> Iterator[Server]:
    env = {
        "GPU_PLATFORM_CONTAINER_RUNTIME": "docker",
        "GPU_PLATFORM_CONTAINER_HOST": docker_address,
        "GPU_PLATFORM_INVENTORY": "sim",
    }
    server = Node(tmp_path / "data", env).start()
    yield server
    if server.proc is not None and server.proc.poll() is None:
        server.stop()  # stops its containers
    assert server.proc is not None


def submit(server: Server, *args: str) -> str:
    done = server.cli("submit", "-q", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def containers_of(runtime: DockerContainerRuntime, job_id: str) -> list[Any]:
    return runtime.list_ours({JOB_LABEL: job_id})


def ended(job: dict[str, Any]) -> bool:
    return job["state"] in ("COMPLETED", "FAILED", "CANCELLED")


def test_an_image_job_runs_in_its_image_and_sees_only_its_gpus_and_its_env(
    server: Server, base: str
) -> None:
    job_id = submit(
        server, "--gpus", "2", "--image", base, "-e", "GREETING=hi", "--",
        "sh", "-c", "test -f /.dockerenv && echo in-a-container; env | sort",
    )  # fmt: skip
    job = server.wait_job(job_id, ended)
    assert job["state"] == "COMPLETED", job["reason"]
    assert job["image"] == base
    log = httpx.get(f"{server.url}/v1/jobs/{job_id}/logs", timeout=10).text
    env = dict(line.split("=", 1) for line in log.splitlines() if "=" in line)
    gpus = ",".join(str(i) for i in job["allocation"]["gpu_indices"])
    assert "in-a-container" in log
    assert env["CUDA_VISIBLE_DEVICES"] == gpus
    assert env["NVIDIA_VISIBLE_DEVICES"] == gpus
    assert env.get("ROCR_VISIBLE_DEVICES", "") == ""
    assert env.get("HIP_VISIBLE_DEVICES", "") == ""
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"]) == ("0", "1", "127.0.0.1")
    assert env["GREETING"] == "hi"
    assert env["GPU_PLATFORM_JOB_ID"] == job_id


def test_an_image_job_over_its_memory_limit_is_killed_out_of_memory(
    server: Server, base: str
) -> None:
    job_id = submit(
        server, "--memory", "64M", "--image", base, "--",
        "python3", "-c", "b = bytearray(512 << 20); print('survived')",
    )  # fmt: skip
    job = server.wait_job(job_id, ended)
    assert job["state"] == "FAILED"
    assert "out of memory" in job["reason"]
    assert "survived" not in httpx.get(f"{server.url}/v1/jobs/{job_id}/logs", timeout=10).text


def test_cancel_stops_and_removes_the_container(
    server: Server, base: str, runtime: DockerContainerRuntime
) -> None:
    job_id = submit(server, "--image", base, "--", "sleep", "600")
    server.wait_job(job_id, lambda j: j["state"] == "RUNNING")
    assert wait_for(lambda: len(containers_of(runtime, job_id)) == 1)
    done = server.cli("jobs", "cancel", job_id)
    assert done.returncode == 0, done.stderr
    assert server.wait_job(job_id, ended)["state"] == "CANCELLED"
    assert wait_for(lambda: containers_of(runtime, job_id) == [])


def test_the_time_limit_stops_and_removes_the_container(
    server: Server, base: str, runtime: DockerContainerRuntime
) -> None:
    job_id = submit(server, "--time-limit", "2", "--image", base, "--", "sleep", "600")
    job = server.wait_job(job_id, ended)
    assert job["state"] == "FAILED"
    assert "time limit of 2s exceeded" in job["reason"]
    assert wait_for(lambda: containers_of(runtime, job_id) == [])


def test_an_image_the_node_lacks_fails_the_job_with_the_reason(server: Server) -> None:
    job_id = submit(server, "--image", "gpu-platform/no-such-image:1", "--", "true")
    job = server.wait_job(job_id, ended)
    assert job["state"] == "FAILED"
    assert "gpu-platform/no-such-image:1" in job["reason"]


def test_mounts_without_an_image_are_refused_naming_the_field(server: Server) -> None:
    done = server.cli("submit", "--mount", "/tmp:/data", "--", "true")
    assert done.returncode != 0
    assert "mounts" in done.stderr


def test_a_restarted_agent_removes_the_container_its_killed_predecessor_left(
    server: Server, base: str, runtime: DockerContainerRuntime
) -> None:
    job_id = submit(server, "--image", base, "--", "sleep", "600")
    server.wait_job(job_id, lambda j: j["state"] == "RUNNING")  # recorded at its bind
    # its container made and started (the launch follows the bind)
    assert wait_for(lambda: [c.running for c in containers_of(runtime, job_id)] == [True])
    [orphan] = containers_of(runtime, job_id)
    server.stop(signal.SIGKILL)  # the agent dies; the daemon keeps its container running
    assert [c.running for c in containers_of(runtime, job_id)] == [True]
    server.start()  # the same node, the same data directory
    # the orphan goes; the job's attempt was lost with the agent, so a new one may start
    assert wait_for(lambda: orphan.id not in {c.id for c in containers_of(runtime, job_id)}, 60)
