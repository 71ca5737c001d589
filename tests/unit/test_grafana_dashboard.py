"""Every query of the shipped Grafana dashboard names series and labels that we export: the
server's /metrics after a scenario that touches every series (GPU and job gauges, placement
failures, a preemption, REST and gRPC calls), and the Raft series of a running RaftNode."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import grpc
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2 as pb
from gpu_platform.adapters.inbound.grpc.v1 import gpu_platform_pb2_grpc as pb_grpc
from gpu_platform.adapters.outbound.observability import PrometheusRaftMetrics
from gpu_platform.application.raft_node import RaftNode, RaftNodeConfig
from gpu_platform.domain.consensus import Role
from gpu_platform.testing.raft_fakes import InMemoryRaftHub, InMemoryRaftStorage
from gpu_platform.testing.raft_kv import KvStateMachine
from tests.unit.adapters.test_job_traces import Rig, rig

__all__ = ["rig"]

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy/grafana/gpu-platform-scheduler.json"
FUNCTIONS = {"sum", "by", "rate", "avg", "max", "min", "count", "histogram_quantile"}


def exported_by(text: str, into: dict[str, set[str]]) -> None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            into.setdefault(sample.name, set()).update(sample.labels)


def raft_exposition() -> str:
    """/metrics of a single-peer RaftNode that has committed one entry."""
    registry, hub = CollectorRegistry(), InMemoryRaftHub()
    metrics = PrometheusRaftMetrics(registry, 1)
    node = RaftNode(
        RaftNodeConfig(id=1, voters=(1,), tick_interval=0.01, seed=1),
        InMemoryRaftStorage(),
        hub.transport(1),
        KvStateMachine(),
        metrics,
    )
    metrics.watch(node.status)
    node.start()
    try:
        for _ in range(3000):  # a single voter elects itself within a few ticks
            if node.status().role is Role.LEADER:
                break
            time.sleep(0.01)
        node.propose(b'{"key": "k", "value": "v"}').result(timeout=30)
        return generate_latest(registry).decode()
    finally:
        node.stop()
        hub.close()


def test_every_panel_queries_series_we_export(rig: Rig) -> None:
    client, runner = rig.client, rig.runner
    done = client.post("/v1/jobs", json={"command": ["fake-exit", "0"], "gpus": 1}).json()
    job = client.post("/v1/jobs", json={"command": ["fake-forever"], "gpus": 1}).json()
    rig.wait(lambda: rig.state(job["id"]) == "RUNNING")
    rig.clock.advance(60)
    runner.deliver()
    rig.wait(lambda: rig.state(done["id"]) == "COMPLETED")
    big = client.post("/v1/jobs", json={"command": ["fake-forever"], "gpus": 8}).json()
    gpu = client.get(f"/v1/jobs/{job['id']}").json()["allocation"]["gpu_indices"][0]
    client.post("/v1/debug/inject", json={"script": f"xid 79 on gpu {gpu}"})
    rig.wait(lambda: rig.state(job["id"]) == "QUEUED")
    assert rig.state(big["id"]) == "QUEUED"
    server = rig.container.grpc_server()
    assert server is not None
    with grpc.insecure_channel(server.address) as channel:
        pb_grpc.JobServiceStub(channel).GetJob(pb.GetJobRequest(id=job["id"]), timeout=5)

    exported: dict[str, set[str]] = {}
    rig.wait(lambda: "gpu_platform_placement_failures_total" in client.get("/metrics").text)
    exported_by(client.get("/metrics").text, exported)
    exported_by(raft_exposition(), exported)
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["panels"]
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            names = {
                n for n in re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*[{(\[]", expr)
            } - FUNCTIONS
            assert names, expr
            for name in names:
                assert name in exported, f"{panel['title']}: {name} is not exported"
                used = set(re.findall(rf"{name}\{{([^}}]*)\}}", expr))
                for selector in used:
                    for label in re.findall(r"(\w+)\s*[!=]~?", selector):
                        assert label == "instance" or label in exported[name], (name, label)
