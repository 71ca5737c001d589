"""The platform's own image and the compose cluster, on a real Docker daemon (host network)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpu_platform.testing.system import require
from tests.containers.conftest import REPO
from tests.integration.conftest import wait_for

COMPOSE_FILES = ("-f", "docker-compose.yml", "-f", "docker-compose.host.yml")
TOKEN = "gpc_compose_test_0123456789"  # the cluster's shared secret (docs/replication.md)


def compose_command(address: str) -> list[str]:
    """`docker compose` (v2 plugin) when the CLI has it, else `docker-compose` (v1)."""
    docker = shutil.which("docker")
    env = dict(os.environ, DOCKER_HOST=address)
    if docker and subprocess.run([docker, "compose", "version"], env=env, capture_output=True,
                                 check=False).returncode == 0:  # fmt: skip
        return [docker, "compose"]
    v1 = shutil.which("docker-compose")
    require(v1 is not None, "neither docker compose nor docker-compose: install docker-compose")
    assert v1 is not None
    return [v1]


def completed(url: str, job_id: str) -> dict[str, Any]:
    last: dict[str, Any] = {}

    def done() -> bool:
        nonlocal last
        try:
            last = httpx.get(f"{url}/v1/jobs/{job_id}", timeout=5, follow_redirects=True).json()
        except httpx.HTTPError:
            return False
        return last.get("state") in ("COMPLETED", "FAILED", "CANCELLED")

    assert wait_for(done, timeout=120), last
    return last


def test_the_platform_image_serves_and_runs_a_submitted_job(
    platform: str, docker_address: str, docker_api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", docker_address)
    from testcontainers.core.config import testcontainers_config
    from testcontainers.core.container import DockerContainer

    monkeypatch.setattr(testcontainers_config, "ryuk_disabled", True)  # no registry: no reaper
    env = {
        "GPU_PLATFORM_HOST": "127.0.0.1",
        "GPU_PLATFORM_LOG_FORMAT": "json",
        "GPU_PLATFORM_PORT": "0",  # any free port: its `listening` log line names it
        "GPU_PLATFORM_GRPC_PORT": "0",
        "GPU_PLATFORM_RAFT_PORT": "0",
        "GPU_PLATFORM_AGENT_PORT": "0",
        "GPU_PLATFORM_INVENTORY": "sim",
    }
    container = DockerContainer(platform, env=env, network_mode="host")
    with container:
        ports: dict[str, int] = {}

        def listening() -> bool:
            ports.update(_listening(container))
            return bool(ports)

        assert wait_for(listening, timeout=120), container.get_logs()
        url = f"http://127.0.0.1:{ports['rest']}"
        assert wait_for(lambda: _healthz(url), timeout=120), container.get_logs()
        body = {"command": ["sh", "-c", "echo in the image; id -un"], "gpus": 1}
        job = httpx.post(f"{url}/v1/jobs", json=body, timeout=10).json()
        job = completed(url, job["id"])
        assert job["state"] == "COMPLETED", job["reason"]
        log = httpx.get(f"{url}/v1/jobs/{job['id']}/logs", timeout=10).text
        assert "in the image" in log
        assert "gpu-platform" in log  # the image's non-root user
        cid = container.get_wrapped_container().id
        assert wait_for(lambda: _health(docker_api, cid) == "healthy", timeout=120)


def _listening(container: Any) -> dict[str, int]:
    """The ports of the server's `listening` log line (infrastructure/bound_ports.py)."""
    out, err = container.get_logs()
    for line in (out + err).decode(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            data = json.loads(line)
            if isinstance(data, dict) and data.get("event") == "listening":
                return {k: v for k, v in data.items() if isinstance(v, int)}
    return {}


def _healthz(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _health(api: Any, cid: str) -> str:
    return str(api.inspect_container(cid)["State"].get("Health", {}).get("Status", ""))


def test_the_compose_files_are_valid(docker_address: str) -> None:
    compose = compose_command(docker_address)
    env = dict(os.environ, DOCKER_HOST=docker_address, GPU_PLATFORM_CLUSTER_TOKEN=TOKEN)
    for files in (("-f", "docker-compose.yml"), COMPOSE_FILES):
        done = subprocess.run([*compose, *files, "config", "-q"], cwd=REPO, env=env,
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr


@pytest.fixture
def cluster(platform: str, docker_address: str) -> Iterator[list[str]]:
    """The compose cluster's 3 servers and 2 agents on the host's network (no registry here
    for the Prometheus and Grafana images: `config` checks those)."""
    compose = [*compose_command(docker_address), "-p", f"gp-test-{os.getpid()}", *COMPOSE_FILES]
    env = dict(
        os.environ,
        DOCKER_HOST=docker_address,
        GPU_PLATFORM_IMAGE=platform,
        GPU_PLATFORM_CLUSTER_TOKEN=TOKEN,
    )
    services = ["server-1", "server-2", "server-3", "agent-1", "agent-2"]
    up = subprocess.run([*compose, "up", "-d", "--no-build", *services], cwd=REPO, env=env,
                        capture_output=True, text=True, check=False, timeout=300)  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        yield [f"http://127.0.0.1:{p}" for p in (8081, 8082, 8083)]
    finally:
        logs = subprocess.run([*compose, "logs", "--tail", "30"], cwd=REPO, env=env,
                              capture_output=True, text=True, check=False, timeout=60)  # fmt: skip
        subprocess.run([*compose, "down", "-v", "--timeout", "5"], cwd=REPO, env=env,
                       capture_output=True, check=False, timeout=300)  # fmt: skip
        Path(REPO / ".pytest_cache").mkdir(exist_ok=True)
        (REPO / ".pytest_cache" / "compose.log").write_text(logs.stdout + logs.stderr)
        print(logs.stdout[-20000:], logs.stderr[-2000:])  # shown by pytest when the test fails


def test_the_compose_cluster_elects_a_leader_and_runs_a_job_on_an_agent(
    cluster: list[str],
) -> None:
    status: dict[str, dict[str, Any]] = {}

    def led() -> bool:  # all three servers answer, one leads and both agents stream to it
        for url in cluster:
            try:
                status[url] = httpx.get(f"{url}/v1/cluster", timeout=3).json()
            except (httpx.HTTPError, ValueError) as e:  # not up yet, or not JSON yet
                status[url] = {"error": repr(e)}
        leaders = [s for s in status.values() if s.get("role") == "leader"]
        answered = all("error" not in s for s in status.values())
        return answered and len(leaders) == 1 and len(leaders[0].get("agents", {})) == 2

    assert wait_for(led, timeout=180), status
    body = {"command": ["sh", "-c", "echo rank $RANK on $CUDA_VISIBLE_DEVICES"], "gpus": 2}
    deadline = time.monotonic() + 60
    reply: httpx.Response | None = None
    while True:  # any server takes it: a follower redirects to the leader
        with contextlib.suppress(httpx.TransportError):
            reply = httpx.post(f"{cluster[2]}/v1/jobs", json=body, timeout=10,
                               follow_redirects=True)  # fmt: skip
        if (reply is not None and reply.status_code == 201) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert reply is not None and reply.status_code == 201, reply and reply.text
    job = completed(cluster[0], reply.json()["id"])
    assert job["state"] == "COMPLETED", job["reason"]
    assert job["allocation"]["node"] in ("node-1", "node-2")
