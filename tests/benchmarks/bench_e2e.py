"""End-to-end submit latency against a live `gpu-platform serve` process on loopback:
POST /v1/jobs over HTTP (httpx, keep-alive) and SubmitJob over gRPC, the same job spec, the
same server, in one run. The jobs ask for no GPU and run `true`, so the queue never blocks;
each figure is the client-observed time from request to the acknowledged (durable) answer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import httpx
from _harness import baseline, result

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.testing.ports import wait_for_ports

ENTRY = [sys.executable, "-m", "gpu_platform.main"]


def _time(fn: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def run(quick: bool = False) -> list[dict[str, Any]]:
    """The default server (a one-voter Raft cluster whose jobs run on its in-process agent)
    and, for comparison, the embedded core (server_id = 0: SQLite, jobs in the server)."""
    n = 100 if quick else 1000
    if os.environ.get("GPU_PLATFORM_BENCH_SMOKE"):  # the test suite's run: the schema only
        n = 10
    rows: list[dict[str, Any]] = []
    for server_id, store in (("1", "raft"), ("0", "sqlite")):
        rest, grpc_samples = _measure(n, server_id)
        rest_row = result("e2e.submit", {"api": "rest", "submits": n, "store": store}, rest)
        grpc_row = result(
            "e2e.submit",
            {"api": "grpc", "submits": n, "store": store},
            grpc_samples,
            baseline=baseline("rest", rest_row),
        )
        rows += [rest_row, grpc_row]
    return rows


def _measure(n: int, server_id: str) -> tuple[list[float], list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(
            os.environ,
            GPU_PLATFORM_LOG_LEVEL="warning",
            GPU_PLATFORM_LOG_FORMAT="json",
            GPU_PLATFORM_GRPC_PORT="0",  # any free port, as is --port 0: see ports.json
            GPU_PLATFORM_SERVER_ID=server_id,
            GPU_PLATFORM_RAFT_PORT="0",
            GPU_PLATFORM_AGENT_PORT="0",
            GPU_PLATFORM_ISOLATION="none",
        )
        server = subprocess.Popen(
            [*ENTRY, "serve", "--port", "0", "--data-dir", str(Path(tmp) / "data")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            ports = wait_for_ports(Path(tmp) / "data", server, timeout=60)
            http_port, grpc_port = ports["rest"], ports["grpc"]
            base = f"http://127.0.0.1:{http_port}"
            with httpx.Client(base_url=base, timeout=30) as client:
                for _ in range(300):
                    try:
                        if client.get("/healthz").status_code == 200:
                            break
                    except httpx.HTTPError:
                        time.sleep(0.05)
                body = {"command": ["true"], "gpus": 0}
                for _ in range(20):  # warm-up
                    client.post("/v1/jobs", json=body)
                rest = _time(lambda: client.post("/v1/jobs", json=body).raise_for_status(), n)
            with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                stub = pb_grpc.JobServiceStub(channel)
                request = pb.SubmitJobRequest(command=["true"], gpus=0)
                for _ in range(20):
                    stub.SubmitJob(request, timeout=30)
                grpc_samples = _time(lambda: stub.SubmitJob(request, timeout=30), n)
        finally:
            server.terminate()
            server.wait(timeout=60)
    return rest, grpc_samples
