"""A real Prometheus (Debian package `prometheus`) scrapes a real `gpu-platform serve` on
loopback; we ask Prometheus's HTTP API for our series."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from gpu_platform.testing.cluster_procs import ReplicatedCluster
from gpu_platform.testing.ports import wait_for_listening
from gpu_platform.testing.system import require_tool
from tests.integration.conftest import Server, wait_for


def query(port: int, expr: str) -> list[dict[str, Any]]:
    try:
        r = httpx.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": expr}, timeout=5)
    except httpx.HTTPError:
        return []
    if r.status_code != 200:  # 503 "Service Unavailable" while Prometheus is starting up
        return []
    data = r.json()
    return data["data"]["result"] if data.get("status") == "success" else []


def test_prometheus_scrapes_gpu_job_usage_and_scheduler_series(
    server_factory: Callable[..., Server], tmp_path: Path
) -> None:
    prometheus = require_tool("prometheus", "prometheus")
    server = server_factory()
    job = server.cli(
        "submit", "-q", "--gpus", "2", "--", sys.executable, "-c", "import time; time.sleep(600)"
    )
    job_id = job.stdout.strip()
    server.wait_job(job_id, lambda j: j["state"] == "RUNNING")

    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: gpu-platform\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{server.port}']\n"
    )
    proc = subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         "--web.listen-address=127.0.0.1:0"],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("wb"),
    )  # fmt: skip
    try:
        port = wait_for_listening(proc)
        assert wait_for(lambda: len(query(port, "DCGM_FI_DEV_GPU_TEMP")) == 8, 60), (
            tmp_path / "prometheus.log"
        ).read_text()[-2000:]
        held = query(port, f'DCGM_FI_DEV_GPU_UTIL{{hpc_job="{job_id}"}}')
        assert sorted(r["metric"]["gpu"] for r in held) == ["0", "1"]
        assert all(r["metric"]["tenant"] == "default" for r in held)
        running = query(port, 'gpu_platform_jobs{state="RUNNING"}')
        assert [r["value"][1] for r in running] == ["1"]
        assert query(port, "gpu_platform_tenant_gpu_hours")
        started = query(
            port, 'gpu_platform_job_transitions_total{from_state="SCHEDULED",to_state="RUNNING"}'
        )
        assert [r["value"][1] for r in started] == ["1"]
        placed = query(
            port,
            'sum(gpu_platform_placement_decision_microseconds_bucket{outcome="placed",le="+Inf"})',
        )
        assert [r["value"][1] for r in placed] == ["1"]
        assert query(port, "gpu_platform_gpu_allocation_ratio")[0]["value"][1] == "0.25"
        assert query(port, 'up{job="gpu-platform"}')[0]["value"][1] == "1"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_prometheus_scrapes_replicated_servers_and_an_agent(tmp_path: Path) -> None:
    """Three replicated servers (Raft series) and one agent (dcgm-exporter series labelled
    with the job on each GPU, and the agent's own series) under one Prometheus."""
    prometheus = require_tool("prometheus", "prometheus")
    c = ReplicatedCluster(tmp_path / "cluster", servers=3, agents=1).start()
    proc = None
    try:
        c.wait_ready(timeout=90)
        job = c.submit(["sleep", "600"], gpus=1)
        assert wait_for(lambda: c.job(job["id"])["state"] == "RUNNING", 60)
        servers = ", ".join(f"'127.0.0.1:{p}'" for p in c.http.values())
        agent = f"'127.0.0.1:{c.agent_metrics['node-1']}'"
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n"
            "scrape_configs:\n"
            f"  - job_name: servers\n    static_configs:\n      - targets: [{servers}]\n"
            f"  - job_name: agents\n    static_configs:\n      - targets: [{agent}]\n"
        )
        proc = subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             "--web.listen-address=127.0.0.1:0"],
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "prometheus.log").open("wb"),
        )  # fmt: skip
        port = wait_for_listening(proc)
        assert wait_for(lambda: len(query(port, "gpu_platform_raft_term")) == 3, 60), (
            tmp_path / "prometheus.log"
        ).read_text()[-2000:]
        leaders = query(port, "sum(gpu_platform_raft_is_leader)")
        assert [r["value"][1] for r in leaders] == ["1"]
        assert wait_for(lambda: len(query(port, 'DCGM_FI_DEV_GPU_TEMP{job="agents"}')) == 8, 60)
        held = query(port, f'DCGM_FI_DEV_GPU_UTIL{{hpc_job="{job["id"]}"}}')
        assert [r["metric"]["Hostname"] for r in held] == ["node-1"]
        connected = query(port, "gpu_platform_agent_connected")
        assert [r["value"][1] for r in connected] == ["1"]
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        c.close()
