"""Port 0: `serve` and `agent` bind any free port themselves and report the ones they got
(<data_dir>/ports.json and a `listening` log line), so no test hands a server a port that
another process may take first (infrastructure/bound_ports.py, testing/ports.py)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gpu_platform.testing.ports import wait_for_ports
from tests.integration.conftest import ENTRY, Server


def accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def listening_lines(log: Path) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == "listening"]


def test_serve_on_port_zero_reports_each_port_it_got_and_every_one_answers(
    server_factory: Callable[..., Server], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "ports.json").write_text('{"pid": 1, "rest": 1}')  # a killed run's: not ours
    server = server_factory(data)  # --port 0, every other port 0 (tests/integration/conftest.py)
    assert server.proc is not None
    ports = json.loads((data / "ports.json").read_text())
    assert set(ports) == {"pid", "rest", "grpc", "agent", "raft"}
    assert ports["pid"] == server.proc.pid and 0 not in ports.values()
    line = listening_lines(server.log)[-1]  # the one log line says the same
    assert {k: line[k] for k in ports if k != "pid"} == {k: ports[k] for k in ports if k != "pid"}
    assert httpx.get(f"http://127.0.0.1:{ports['rest']}/healthz", timeout=10).status_code == 200
    with grpc.insecure_channel(f"127.0.0.1:{ports['grpc']}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = health.Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert accepts(ports["agent"]) and accepts(ports["raft"])
    cluster = httpx.get(f"http://127.0.0.1:{ports['rest']}/v1/cluster", timeout=10).json()
    assert [s["http_url"] for s in cluster["servers"]] == [f"http://127.0.0.1:{ports['rest']}"]
    assert [s["agent_address"] for s in cluster["servers"]] == [f"127.0.0.1:{ports['agent']}"]

    agent_dir = tmp_path / "agent"
    token = (server.data_dir / "cluster-token").read_text().strip()
    agent = subprocess.Popen(
        [*ENTRY, "agent", "--servers", f"127.0.0.1:{ports['agent']}", "--node", "node-x",
         "--sim-profile", "dgx-a100", "--data-dir", str(agent_dir), "--metrics-port", "0"],
        env=dict(server.env, GPU_PLATFORM_CLUSTER_TOKEN=token),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        metrics = wait_for_ports(agent_dir, agent)["metrics"]
        url = f"http://127.0.0.1:{metrics}/metrics"
        assert 'gpu_platform_agent_connected{node="node-x"}' in httpx.get(url, timeout=10).text
    finally:
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=60) == 0
    assert not (agent_dir / "ports.json").exists()  # a clean stop removes it

    assert server.stop() == 0
    assert not (server.data_dir / "ports.json").exists()
